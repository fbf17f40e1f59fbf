"""The model's figures fitted to a recording (no recording holds them): where a request's CPU falls
between its read and its reply, and the share of replies delayed on their way (the clients' tail
beyond every CPU the kernel saw them wait for). Each is fitted to the recording it calibrates from,
and named in Calibration.fitted with what it was fitted to."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from valkeytrace.analysis.calls import PassCost
from valkeytrace.pipeline.params import ClientCosts, Group, Jitter, Params, ServerCosts
from valkeytrace.pipeline.pool import simulate_many

SPLIT_GRID = (0.3, 0.4, 0.5, 0.6, 0.7)  # a request's server and client CPU in its read, the rest in its reply
SPLIT_SEEDS = (5, 6, 7, 8, 9)  # each split simulated once a seed, its median p50 and TPS fitted: one seed's
#                                window may fall on the other path (a GET waiting one sync or two), and the
#                                split fitted on it flipped (0.5 <-> 0.7, issue 75); 25 windows take ~2 s here
JITTER_MAX = 0.05          # at most this share of the replies delayed
JITTER_STEPS = 10          # bisection steps
JITTER_SEED = 7


def cost_params(cost: PassCost, split: float, extra_us: float, wake: float, sync_cpu: float,
                main_share: float | None) -> tuple[ServerCosts, ClientCosts]:
    """The model's per-request costs from a pass's totals: `split` of each in the read, the rest in the
    reply; a SET's extra in its execution; under I/O threads the main thread executes its measured share
    of the server's CPU (main_share) and the I/O thread reads the rest of the read and writes the reply."""
    srv, cli = cost.server_us, cost.client_us
    read = srv * split
    execute = read if main_share is None else min(read, srv * main_share)
    server = ServerCosts(read_us={"GET": read, "SET": read + extra_us, "PING": read}, write_us=srv - read,
                         wake_us=wake, deliver_us=srv - read, sync_cpu_us=sync_cpu,
                         exec_us={"GET": execute, "SET": execute + extra_us},
                         io_read_us=max(0.0, read - execute), io_write_us=srv - read)
    return server, ClientCosts(read_us=cli * split, write_us=cli * (1 - split), wake_us=wake)


def fit_split(params_at, op: str, p50: float | None, tps: float | None, noise: float,
              seeds: tuple = SPLIT_SEEDS) -> tuple[float, dict]:
    """The split (SPLIT_GRID) under which the recorded cell, simulated as recorded (once a seed, the seeds'
    median p50 and TPS), comes nearest its measured p50 and TPS (the root of the squared logs of their
    ratios); of the splits within `noise` (the
    recording's own spread, as a log) of the nearest, the one nearest the grid's middle: a split the
    recording cannot tell apart is not chosen by the simulation's noise. params_at(split) gives the cell's
    parameters. Returns (split, {split: (simulated p50, TPS)}); without a measured p50: the middle."""
    middle = SPLIT_GRID[len(SPLIT_GRID) // 2]
    if not p50:
        return middle, {}
    tried, score = {}, {}
    sims = simulate_many([(params_at(s), seed) for s in SPLIT_GRID for seed in seeds])  # side by side
    for i, s in enumerate(SPLIT_GRID):
        runs = [r for res in sims[i * len(seeds):(i + 1) * len(seeds)] if (r := res.ops.get(op)) is not None and r.p50_us]
        if not runs:
            continue
        sim_p50, sim_tps = float(np.median([r.p50_us for r in runs])), float(np.median([r.tps for r in runs]))
        tried[s] = (sim_p50, sim_tps)
        score[s] = float(np.hypot(np.log(sim_p50 / p50), np.log(sim_tps / tps) if tps and sim_tps else 0.0))
    if not score:
        return middle, tried
    best = min(score.values())
    near = [s for s, v in score.items() if v <= best + noise]
    return min(near, key=lambda s: (abs(s - middle), s)), tried


def fit_jitters(cases: list[tuple[Params, PassCost]]) -> list[tuple[Jitter | None, str]]:
    """Each GET-only pass's share of replies delayed on their way (by an exponential delay whose mean puts the
    pass's p99 where it was measured when 1% of them are), so that the pass, simulated with its own costs
    (its Params), comes out at its own measured p99: by bisection over one simulated pass each (the passes
    simulated side by side, pipeline/pool.py)."""
    fittable = [i for i, (_, p) in enumerate(cases) if p.p99_us and p.clients and p.seconds]
    jobs = [(replace(cases[i][0], groups=(Group("GET", cases[i][1].clients),), duration_s=cases[i][1].seconds,
                     warmup_s=0.05, jitter=None), JITTER_SEED + i) for i in fittable]
    sims = dict(zip(fittable, simulate_many(jobs)))
    return [_bisect(sims[i].ops["GET"].latencies_us, p, i) if i in sims else (None, "not fitted (the pass has no p99)")
            for i, (_, p) in enumerate(cases)]


def _bisect(lat, p: PassCost, index: int) -> tuple[Jitter | None, str]:
    if lat is None or not len(lat):
        return None, "not fitted (the simulated pass answered nothing)"
    p50, p99 = float(np.percentile(lat, 50)), float(np.percentile(lat, 99))
    if p99 >= p.p99_us:
        return None, f"none needed (p99 {p.p99_us:.0f} µs, simulated {p99:.0f})"
    mean = p.p99_us - p50
    rng = np.random.default_rng(11 + index)
    u, e = rng.random(len(lat)), rng.exponential(mean, len(lat))

    def p99_with(share: float) -> float:
        return float(np.percentile(lat + np.where(u < share, e, 0.0), 99))
    lo, hi = 0.0, JITTER_MAX
    for _ in range(JITTER_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p99_with(mid) < p.p99_us else (lo, mid)
    share = round((lo + hi) / 2, 4)
    return Jitter(share, mean), f"{share:.4f} of replies delayed by a mean {mean:.0f} µs (p99 {p.p99_us:.0f} µs, " \
                                f"{p99:.0f} simulated without)"
