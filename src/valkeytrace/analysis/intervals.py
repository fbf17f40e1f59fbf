"""A predicted figure's interval for one recording of the baseline's shape (pure).

A recording's figure is the median of its repeats, each a window of the host. The model gives each
window's figure (simulated windows, each with its own draw of the baseline's passes and windows); a
recording of `repeats` windows is drawn from them; its median is moved by how far the host moved within
the baseline (`host`: a shift every window of a recording shares, from spreads shift_sd measures, widened
by Student's t for the few repeats they are counted from; analysis/predict.py says which) and by
the model's miss on the baseline as recorded (model_sd: how far the model is off where the answer is
known). The interval is the LEVEL central range of that median; the point its median. All spreads are
of the log of a figure (a ratio).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVEL = 0.9
ALPHA = 0.01  # the rank tests' significance level (a change between two sides' samples)
DRAWS = 4000             # recordings drawn per interval


@dataclass(frozen=True)
class Spread:
    point: float | None
    lo: float | None
    hi: float | None


def _logs(xs: list) -> np.ndarray:
    a = np.asarray([x for x in xs if x is not None], dtype=np.float64)
    return np.log(a[a > 0])


def shift_sd(groups: list, level: float = LEVEL) -> float:
    """The host's movement from fixed loads repeated: each group a load's figures over its repeats, their
    pooled SD of the log (each group about its own mean), widened by Student's t over the normal's quantile
    at `level` for the pooled degrees of freedom (0 with none)."""
    ss, dof = 0.0, 0
    for g in groups:
        x = _logs(g)
        if len(x) >= 2:
            ss += float(np.sum((x - x.mean()) ** 2))
            dof += len(x) - 1
    if not dof:
        return 0.0
    from scipy.stats import norm, t  # ~0.5 s to import: only where a spread is widened (not every report)

    q = 1 - (1 - level) / 2
    return float(np.sqrt(ss / dof) * t.ppf(q, dof) / norm.ppf(q))


def model_sd(measured: float | None, simulated: float | None) -> float:
    """The model's miss on the baseline as recorded: |log(simulated / measured)| (0 without both)."""
    if not measured or not simulated or measured <= 0 or simulated <= 0:
        return 0.0
    return float(abs(np.log(simulated / measured)))


def pooled_miss(misses) -> float:
    """The root mean square of misses: a latency's range takes at least that of the op's latencies the
    self-check reproduced (mean, p50, p95, p99; those measured and simulated both), the rate at least that
    of itself and the mean (analysis/predict.self_check). One figure's miss is one draw of how far the
    model is off, and the p50 and the rate are the two the fit chose the CPU split on: a fsync-paced p50
    came out within 0.3% of its baseline and missed by 5% under a gather window in CI, where the same
    baseline's p95 was 9% off."""
    m = list(misses)
    return float(np.sqrt(np.mean(np.square(m)))) if m else 0.0


def spread(windows: list, repeats: int, host: float, model: float, rng: np.random.Generator,
           level: float = LEVEL) -> Spread:
    """The median of `repeats` windows drawn from the simulated windows' figures, moved by the host's
    shift and the model's miss: its median and central `level` range."""
    x = _logs(windows)
    if not len(x):
        vals = [w for w in windows if w is not None]
        return Spread(round(float(np.median(vals)), 1) if vals else None, None, None)
    r = max(1, int(repeats))
    med = np.median(x[rng.integers(len(x), size=(DRAWS, r))], axis=1)
    sd = float(np.hypot(host, model))
    if sd:
        med = med + rng.normal(0.0, sd, size=DRAWS)
    q = (1 - level) / 2
    lo, mid, hi = np.exp(np.quantile(med, [q, 0.5, 1 - q]))
    return Spread(round(float(mid), 1), round(float(lo), 1), round(float(hi), 1))
