"""Each side's durability, from the kernel's timestamps alone (the eBPF backend's window: the
fdatasync/fsync and AOF-write calls of every thread, and in write-only cells each client request's
arrival, read and reply): the same record for any build, whichever thread makes writes durable.

- thread: the role whose fdatasync/fsync calls are most frequent (main under `always`, bio_aof
  under `everysec` or a real #3381 build, vt_offload under the virtual offload);
- a job: on that thread, the AOF write(s) since its previous sync and the sync that makes them
  durable, from the first write to the sync's end (jobs_per_s, job_ms_p50);
- a write: a request on a client connection, from its data's arrival on the server's socket to
  the server's reply (residence_p50_us: the median write's); jobs_waited_per_write: the jobs that
  ended in that interval (mean); release_hop_p50_us: from the last sync's end before a reply to the
  reply (the median write's): the hop a durable reply takes to its socket (an I/O thread's, under
  io-threads: the main thread's handoff, the I/O thread's wake-up and write); durable_wait_p50_us:
  from the server's read of a write to that sync's end (the median write's); both over the writes a
  sync ended for, and None unless they are half the writes or more (everysec: no reply waits);
  writes_per_job: writes answered per job;
- arrival_spread_us: after a job's end, the writes it released come back (their clients' next
  requests): how far apart those arrivals are, the spread of one cohort (median over jobs);
  arrival_delay_us: from the job's end to the first of them (the clients' turnaround);
- cohorts: the write clients over the writes a job carries, rounded: the groups that take turns.
No emulation counter is read: a real #3381 build and the virtual offload are measured alike.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from valkeytrace.analysis.summary import Durability
from valkeytrace.recording.model import ServerWindow, decode_as

SYNC_CALLS = ("fdatasync", "fsync")
MIN_REQUESTS_PER_CONN = 10  # fewer in a window: not a load client (valkeytrace's own INFO, say)


def _jobs(server: ServerWindow, tids: set) -> tuple[np.ndarray, np.ndarray]:
    """(job start, job end) offsets in ns, in end order, of the durability thread(s)."""
    syncs: list = []
    writes: list = []
    for start, dur, tid, cause, state in server.blocked_timeline.events:
        if state != "call" or tid not in tids:
            continue
        if cause in SYNC_CALLS:
            syncs.append((start + dur, start))
        elif cause == "aof_write":
            writes.append(start)
    if not syncs:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    syncs.sort()
    ends = np.array([e for e, _ in syncs], dtype=np.int64)
    sync_starts = np.array([s for _, s in syncs], dtype=np.int64)
    at = np.sort(np.array(writes, dtype=np.int64))
    if not len(at):
        return sync_starts, ends
    # the job begins at its first AOF write after the previous sync ended (if one came before
    # this sync began), else at the sync
    prev_ends = np.concatenate(([np.iinfo(np.int64).min], ends[:-1]))
    first = at[np.minimum(np.searchsorted(at, prev_ends, side="left"), len(at) - 1)]
    return np.where((first >= prev_ends) & (first <= sync_starts), first, sync_starts), ends


def answered(offsets, conns, events, nbytes=None) -> list[tuple[int, int, int, int, int]]:
    """(conn, arrival, read, reply, reply bytes) of each request answered, from a window's socket
    events in time order (server.requests' columns), in reply order per connection; an arrival not
    seen (a request already queued) is its read; reply bytes 0 where the events carry none."""
    out: list = []
    state: dict = {}
    for off, conn, ev, nb in zip(offsets, conns, events, nbytes if nbytes is not None else repeat(0)):
        s = state.setdefault(conn, [None, None])
        if ev == 0:  # arrive
            if s[0] is None and s[1] is None:
                s[0] = off
        elif ev == 1:  # recv
            if s[1] is None:
                s[1] = off
                if s[0] is None:
                    s[0] = off
        elif s[1] is not None:  # send: the reply to what was read
            out.append((conn, s[0], s[1], off, nb))
            state[conn] = [None, None]
    return out


def _role_of_syncs(server: ServerWindow) -> tuple[str | None, set]:
    by_role: Counter = Counter()
    tids: dict[str, set] = {}
    for t in server.threads:
        by_role[t.role] += sum(t.calls[c].count for c in SYNC_CALLS if c in t.calls)
        tids.setdefault(t.role, set()).add(t.tid)
    if not by_role or not max(by_role.values()):
        return None, set()
    role = by_role.most_common(1)[0][0]
    return role, tids[role]


@dataclass
class WindowDurability:
    """One window's durability record (see the module)."""
    thread: str
    jobs: int
    jobs_per_s: float | None
    job_ms_p50: float | None
    writes: int = 0
    writes_per_job: float | None = None
    arrival_spread_us: float | None = None
    arrival_delay_us: float | None = None
    jobs_waited_per_write: float | None = None
    cohorts: int | None = None
    write_clients: int = 0
    residence_p50_us: float | None = None
    release_hop_p50_us: float | None = None
    durable_wait_p50_us: float | None = None


def run_durability(server) -> WindowDurability | None:
    """One window's durability record (see the module), or None without syncs."""
    if not server:
        return None
    server = decode_as(server, ServerWindow)
    role, tids = _role_of_syncs(server)
    if role is None:
        return None
    starts, ends = _jobs(server, tids)
    window_s = server.window_ns / 1e9
    rec = WindowDurability(thread=role, jobs=int(len(ends)), jobs_per_s=len(ends) / window_s if window_s else None,
                           job_ms_p50=float(np.median(ends - starts)) / 1e6 if len(ends) else None)
    cols = server.requests
    if not cols or not len(ends):
        return rec
    reqs = answered(cols.offset_ns, cols.conn, cols.event)
    per_conn = Counter(r[0] for r in reqs)
    reqs = [r for r in reqs if per_conn[r[0]] >= MIN_REQUESTS_PER_CONN]
    if not reqs:
        return rec
    arr = np.array(reqs, dtype=np.int64)
    waited = np.searchsorted(ends, arr[:, 3], side="right") - np.searchsorted(ends, arr[:, 1], side="right")
    clients = len({r[0] for r in reqs})
    rec.writes, rec.write_clients, rec.jobs_waited_per_write = len(reqs), clients, float(waited.mean())
    rec.residence_p50_us = float(np.median(arr[:, 3] - arr[:, 1])) / 1e3
    last = np.searchsorted(ends, arr[:, 3], side="right") - 1  # the last durability event before each reply
    # a durable reply's hop and wait: only where most replies waited for a sync (under everysec a reply
    # waits for none, and the last sync before it ended up to a second earlier: no hop of its)
    held = (waited >= 1) & (last >= 0)
    if held.sum() * 2 >= len(reqs):
        hops = arr[held, 3] - ends[last[held]]
        rec.release_hop_p50_us = float(np.median(hops)) / 1e3
        waits = ends[last[held]] - arr[held, 2]  # read by the server -> that sync's end
        rec.durable_wait_p50_us = float(np.median(np.maximum(waits, 0))) / 1e3
    rec.writes_per_job = len(reqs) / len(ends)
    rec.cohorts = max(1, int(round(clients / rec.writes_per_job)))
    # a cohort: the replies one job released (the last before each reply: `last`), and when their
    # clients' next requests arrived
    released = last
    nxt: dict[int, list] = {}
    order = np.lexsort((arr[:, 3], arr[:, 0]))
    for a, b in zip(order[:-1], order[1:]):
        if arr[a, 0] == arr[b, 0] and released[a] >= 0:
            nxt.setdefault(int(released[a]), []).append(int(arr[b, 1]))
    spreads = [max(v) - min(v) for v in nxt.values() if len(v) >= 2]
    delays = [min(v) - int(ends[k]) for k, v in nxt.items()]
    rec.arrival_spread_us = float(np.median(spreads)) / 1e3 if spreads else None
    rec.arrival_delay_us = float(np.median(delays)) / 1e3 if delays else None
    return rec


def durability(raws: list) -> Durability | None:
    """A cell's record over its repeats: the medians of the windows' figures, the jobs a write
    waited averaged over every write."""
    per = [d for d in (run_durability(r) for r in raws if r) if d]
    if not per:
        return None

    def med(vals):
        vals = [v for v in vals if v is not None]
        return float(np.median(vals)) if vals else None
    writes = sum(d.writes for d in per)
    waited = (sum((d.jobs_waited_per_write or 0.0) * d.writes for d in per if d.writes) / writes) if writes else None
    cohorts = med([d.cohorts for d in per])
    return Durability(thread=Counter(d.thread for d in per).most_common(1)[0][0], jobs_per_s=med([d.jobs_per_s for d in per]),
                      job_ms_p50=med([d.job_ms_p50 for d in per]), writes_per_job=med([d.writes_per_job for d in per]),
                      arrival_spread_us=med([d.arrival_spread_us for d in per]),
                      arrival_delay_us=med([d.arrival_delay_us for d in per]),
                      jobs_waited_per_write=waited, residence_p50_us=med([d.residence_p50_us for d in per]),
                      release_hop_p50_us=med([d.release_hop_p50_us for d in per]),
                      durable_wait_p50_us=med([d.durable_wait_p50_us for d in per]),
                      cohorts=int(round(cohorts)) if cohorts is not None else None,
                      write_clients=int(med([d.write_clients for d in per]) or 0), windows=len(per))
