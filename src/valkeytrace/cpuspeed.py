"""How fast this machine's CPUs run the same work, sample after sample (`valkeytrace doctor`,
benchmarks/host_speed.py). On this project's VM a fixed loop took ~10 ms of its thread's CPU time in
some samples and 15-19 ms in others, on either CPU, in runs lasting seconds, with no steal reported
and no cpufreq or PMU in the guest to say why (docs/performance.md). A timing taken on such a CPU can
move by that much with nothing else changed."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

SLOW = 1.25  # a sample this much slower than the CPU's fastest tenth is "slow"
UNSTABLE = 1.25  # the slowest tenth against the fastest tenth: above it, doctor warns


def _work(n: int) -> int:
    x = 0
    for j in range(n):
        x += j * j
    return x


def samples(cpu: int, count: int, loops: int = 60_000, gap_s: float = 0.02) -> list[float]:
    """Milliseconds of this thread's CPU time that `loops` iterations of a fixed loop took on `cpu`,
    `count` times, `gap_s` apart (the thread pinned there for the duration, its affinity restored)."""
    before = os.sched_getaffinity(0)
    out = []
    try:
        os.sched_setaffinity(0, {cpu})
        _work(loops // 10)  # on the CPU, warm
        for _ in range(count):
            t = time.thread_time()
            _work(loops)
            out.append((time.thread_time() - t) * 1e3)
            time.sleep(gap_s)
    finally:
        os.sched_setaffinity(0, before)
    return out


@dataclass
class Spread:
    """One CPU's samples summarized: the fastest and slowest tenths' times, their ratio, and the
    share of samples slower than SLOW x the fastest tenth."""
    cpu: int
    n: int
    fast_ms: float
    slow_ms: float
    ratio: float
    slow_share: float

    @property
    def unstable(self) -> bool:
        return self.ratio >= UNSTABLE


def spread(cpu: int, ms: list[float]) -> Spread:
    if not ms:
        raise ValueError("no samples")
    xs = sorted(ms)
    tenth = max(1, len(xs) // 10)
    fast, slow = sum(xs[:tenth]) / tenth, sum(xs[-tenth:]) / tenth
    return Spread(cpu, len(xs), fast, slow, slow / fast if fast > 0 else 1.0,
                  sum(1 for x in xs if x > SLOW * fast) / len(xs))


def measure(count: int = 15, loops: int = 60_000) -> list[Spread]:
    """Each CPU this process may run on, sampled in turn."""
    return [spread(cpu, samples(cpu, count, loops)) for cpu in sorted(os.sched_getaffinity(0))]
