"""The host's modes: a host whose CPU per request moves between runs, and the model run in each.

On this project's VM the GET-only passes (and the GET windows under the offload) run in one of two
modes, minutes apart or within one recording: a fast one (server + clients ~19.5-20.5 µs of CPU per
request, GET p50 ~271-295 µs, ~90K GET/s) and a slow one (~22-27 µs, ~319-363 µs, ~70-80K/s). The
packets, softirqs, context switches, IPIs and the cost of a syscall per request are the same in both
(docs/performance.md); the cause is not known, and no run can choose its mode. A prediction from the
median pass inherits the mode that pass ran in, and misses by the modes' distance when the measured
run ran in the other.

So the passes are split into modes by their CPU per request (a pass MODE_GAP or more above the
cheapest is in the slow mode), the model is run with each mode's costs, and a figure predicted is
the modes' figures weighed (geometrically: the modes differ by a ratio) by the chance that a cell,
the median of its repeats, comes out in each (weights): that most of its repeats run in the mode,
each in the slow one with the share of the recording's passes that did, taken with this VM's share
over many recordings (SLOW_SHARE_VM, as PRIOR_RUNS more passes: three passes alone say little). Both
modes' figures stay in the prediction, so a report can say what each would give.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

MODE_GAP = 1.10   # a pass this much above the cheapest pass's CPU per request ran in the slow mode
# This project's VM, 2026-12-04/05: 42 of 144 GET-only passes and offloaded GET windows (29 recordings)
# ran in the slow mode; 6 of 19 offloaded cells' medians did.
SLOW_SHARE_VM = 0.29
PRIOR_RUNS = 3
# Values up to this size cost a GET about the same CPU: the passes of a recording's sizes are pooled to tell
# its modes (a candidate's passes in one mode: 19.3, 19.1 and 19.4 µs a request at 64, 256 and 1024 B).
# A compare records one pass per size, so a size's own pass alone cannot show a second mode.
POOL_MAX_BYTES = 1024


@dataclass(frozen=True)
class PassCost:
    """One GET-only pass's host CPU per request (µs)."""
    server_us: float
    client_us: float
    size: int = 0         # its value size (B)

    @property
    def total_us(self) -> float:
        return self.server_us + self.client_us


@dataclass(frozen=True)
class ModeCost:
    """A mode's CPU per request: the median of the passes that ran in it."""
    name: str             # "fast" or "slow"
    passes: int
    server_us: float
    client_us: float


def split(passes: list[PassCost], size: int | None = None) -> list[ModeCost]:
    """The passes' modes, cheapest first: one, or a fast and a slow one (pure). A mode's costs are its
    passes' of `size` when it has some, else all of its passes' (the passes of several sizes pooled:
    POOL_MAX_BYTES)."""
    if not passes:
        return []
    lo = min(p.total_us for p in passes)
    groups = {"fast": [p for p in passes if p.total_us < lo * MODE_GAP],
              "slow": [p for p in passes if p.total_us >= lo * MODE_GAP]}
    out = []
    for name, g in groups.items():
        if not g:
            continue
        own = [p for p in g if p.size == size] or g
        out.append(ModeCost(name, len(g), float(np.median([p.server_us for p in own])),
                            float(np.median([p.client_us for p in own]))))
    return out


def weights(found: list[ModeCost], repeats: int) -> list[float]:
    """Each mode's weight (in found's order): the chance that most of a cell's `repeats` run in it
    (half of an even split to each), each repeat slow with the passes' share taken with the VM's."""
    if len(found) < 2:
        return [1.0] * len(found)
    n = sum(m.passes for m in found)
    q = (found[1].passes + SLOW_SHARE_VM * PRIOR_RUNS) / (n + PRIOR_RUNS)
    r = max(1, repeats)
    slow = float(binom.sf(r // 2, r, q) + (0.0 if r % 2 else binom.pmf(r // 2, r, q) / 2))
    return [1.0 - slow, slow]


def weighted(values: list[tuple[float | None, float]]) -> float | None:
    """The modes' figures (value, weight) as one: the weighted geometric mean; None when any is None.
    A zero or negative figure (none is expected) falls back to the weighted arithmetic mean."""
    known = [(float(v), n) for v, n in values if v is not None]
    if not known or len(known) < len(values):
        return None
    xs, w = np.array([v for v, _ in known]), np.array([float(n) for _, n in known])
    if (xs <= 0).any():
        return float(np.average(xs, weights=w))
    return float(np.exp(np.average(np.log(xs), weights=w)))


def label(windows: list[PassCost], passes: list[PassCost]) -> list[str]:
    """Each window's mode, in order: "slow" when its CPU per request is MODE_GAP or more above the cheapest
    GET-only pass or window of its recording, else "fast" (pure). Meant for windows whose main thread does
    not fsync (an offload's): under appendfsync always a request's CPU also pays for the sleeps."""
    costs = windows + passes
    if not windows or not costs:
        return []
    lo = min(c.total_us for c in costs)
    return ["slow" if w.total_us >= lo * MODE_GAP else "fast" for w in windows]
