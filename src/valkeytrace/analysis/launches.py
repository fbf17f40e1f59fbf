"""Significance from the launches (`valkeytrace compare`): the variance of a server on this kind
of host lives mostly between launches, so a change is judged against the launch-to-launch spread.

Each launch's repeats are summarised first (their median: one figure per launch); the change is
the ratio of the sides' geometric means of those figures, and its 95% interval is Welch's t
interval on their logarithms (unequal spreads allowed; a latency's spread grows with its level):
significant when the interval excludes 0. A percentile bootstrap over 4 launches a side, tried
first, called 16% of simulated A/A pairs significant (tests/unit/test_launches.py); Welch's t
keeps to its 5% on the same pairs. Used when both sides have MIN_LAUNCHES or more; a
single-launch recording keeps the repeats' rule (tables.significance). Pure.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

MIN_LAUNCHES = 3
LAUNCH_CI = 0.95


def launch_figures(rows: list[tuple], metric: str = "") -> list[float]:
    """One figure per launch (the median of its repeats), in launch order, from (launch, figure) per
    repeat; [] when the rows carry no launch (a plain recording)."""
    by: dict[int, list[float]] = {}
    for launch, v in rows:
        if launch is None or v is None:
            continue
        by.setdefault(int(launch), []).append(float(v))
    return [float(np.median(v)) for _, v in sorted(by.items())]


@dataclass
class Interval:
    """The change of the launch figures: its geometric-mean change, its 95% interval, significance."""
    change_pct: float
    interval_pct: list            # [lo, hi]
    significant: bool
    launches: list                # [baseline, candidate]


def interval(base: list[float], cand: list[float]) -> Interval | None:
    """The change of the launch figures with its 95% interval, or None below MIN_LAUNCHES a side
    (or a figure <= 0)."""
    if len(base) < MIN_LAUNCHES or len(cand) < MIN_LAUNCHES or min(base) <= 0 or min(cand) <= 0:
        return None
    from scipy.stats import ttest_ind

    lb, lc = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(cand, dtype=float))
    diff = float(lc.mean() - lb.mean())
    if lb.var() == 0 and lc.var() == 0:  # no spread on either side: Welch's t is undefined
        lo = hi = diff
    else:
        with warnings.catch_warnings():  # launches alike to the last digits: scipy warns of precision
            warnings.simplefilter("ignore", RuntimeWarning)
            ci = ttest_ind(lc, lb, equal_var=False).confidence_interval(LAUNCH_CI)
        lo, hi = float(ci.low), float(ci.high)
    pct = lambda x: round(100.0 * (float(np.exp(x)) - 1.0), 2)  # noqa: E731
    return Interval(pct(diff), [pct(lo), pct(hi)], bool(lo > 0 or hi < 0), [len(lb), len(lc)])


def launches_needed(base: list[float], cand: list[float], width_goal: float | None = None) -> int | None:
    """Launches a side that would bring the interval's half-width under the change seen (or
    width_goal, in percent): the half-width shrinks as 1/sqrt(n)."""
    iv = interval(base, cand)
    if iv is None:
        return None
    half = (iv.interval_pct[1] - iv.interval_pct[0]) / 2
    goal = width_goal or abs(iv.change_pct)
    if goal <= 0 or half <= goal:
        return None
    n = max(len(base), len(cand))
    return int(np.ceil(n * (half / goal) ** 2))
