"""The golden compare pair (the durable virtual offload against fsync-always, 2 + 2 launches recorded on the
reference machine) analysed once per process, what-if included (~40 s of the model's CPU): test_golden_figures.py
and test_first_screen.py read the same analysis (tests/conftest.py schedules the two files on one worker).
Callers take a copy to change (dataclasses.replace): the analysis itself is shared."""
import functools
from pathlib import Path

from valkeytrace.analysis import report as base
from valkeytrace.recording import format as recfmt

DATA = Path(__file__).resolve().parent.parent / "data"
PAIR = (DATA / "golden-v2-compare-baseline.vtrace", DATA / "golden-v2-compare-candidate.vtrace")


@functools.cache
def analysed(with_whatif: bool = True) -> base.ReportInput:
    return base.analyse([(str(p), recfmt.read(p)) for p in PAIR], with_whatif=with_whatif)
