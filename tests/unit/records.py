"""Valid recording parts for the unit tests' synthetic recordings (recording/model.py declares them):
a test builds what it varies and leaves the rest to these."""

DOC = {"format": "valkeytrace-recording", "version": 2, "label": "x"}


def doc(runs: list, **fields) -> dict:
    """A document around runs (label "x" unless given)."""
    return {**DOC, **fields, "runs": runs}


def run(**fields) -> dict:
    """A finished read-heavy 64 B run unless fields say otherwise."""
    return {"workload": "read-heavy", "value_size": 64, "status": "ok", **fields}


def hist(n: int, each_ns: int = 1000) -> dict:
    """A histogram record of n calls of each_ns each."""
    return {"count": n, "sum_ns": n * each_ns, "min_ns": each_ns, "max_ns": each_ns,
            "buckets": [[1, n]] if n else []}
