"""The replication link between a primary and a replica, from the kernel alone: both nodes'
eBPF windows with their socket reads and writes timed and sized (server.requests with bytes), and
their AOF write and fdatasync calls (blocked_timeline's calls).

- The link: on the primary, the connection it writes the most bytes to; on the replica, the one it
  reads the most from. What each side has moved over it, counted from its window's start, differs
  by an unknown constant (the windows open apart, bytes are in flight): a replica read that
  drained its socket ends exactly where a primary write ended, so the constant is the difference
  most reads agree on (`anchor`). That is the join by the replication stream's offsets: a byte
  the primary wrote is the byte the replica read at the same offset; no clock is trusted for it.
- Two hosts' clocks (valkeytrace merge): with both directions joined by their offsets (the stream
  one way, the replica's acknowledgements the other), a byte's one-way trip bounds the replica's
  clock offset from above one way and from below the other (`exchange`): the offset is the
  middle of the two bounds, its error their half-width.
- A write (a request answered "+OK", a SET's reply): its arrival on the primary, the last AOF sync
  that ended before its reply (what made it durable), the first link write after both (what
  carried it), that write's arrival on the replica and the replica's read of its end offset.
  lag = the arrival on the replica - the primary's read of the write: without I/O threads the
  primary runs a write as it reads it and hands it to the AOF in that loop iteration (Valkey's own
  replication offset advances there), so the lag starts where the stream could have; the time the
  write waited in the primary's socket (its main thread busy) is the primary's, not the link's.
- A durability probe (a "+OK" then a WAITAOF's two-integer reply on one connection): the chain
  arrival -> the primary's sync -> the bytes' arrival on the replica -> its read -> its AOF write -> its sync's end -> its ack
  written -> read by the primary -> the WAITAOF's reply; each step the first (or, going back from
  the reply, the last) event of its kind after (before) the one before it. A probe whose chain is
  out of order is not decomposed (counted), never forced.
- The cap's witness: a link write is early when an AOF write ended before it and no sync that
  began after that write had ended by the time its bytes arrived on the replica (when the
  offsets could not be joined, by the time the primary wrote them: stricter). It reads no
  emulation counter; it sees the AOF writes the kernel sees (under the virtual offload, the
  offload thread's), so bytes queued for a job not yet begun escape it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from valkeytrace.recording.model import ServerWindow, decode_as

from valkeytrace.analysis import durability

ARRIVE, RECV, SEND = 0, 1, 2  # server.requests' event index (tracers/ebpf_window.REQUEST_EVENTS)
OK_REPLY = 5                  # "+OK\r\n"
WAITAOF_REPLY = 12            # "*2\r\n:n\r\n:m\r\n" with one-digit counts
SYNC_CALLS = ("fdatasync", "fsync")
MIN_AGREEING = 0.2            # reads that must agree on the anchor (drained their socket)
LOOPBACK_NS = 100_000         # on loopback a write's data arrives this close before the write returns
NEIGHBOURS = 4                # writes each side of a read's guessed place (merge's clock guess)


@dataclass
class NodeEvents:
    """One node's window on the primary's clock (ns): its socket events and AOF calls."""
    t: np.ndarray
    conn: np.ndarray
    ev: np.ndarray
    nbytes: np.ndarray
    sync_start: np.ndarray  # sorted by start
    sync_end: np.ndarray
    write_start: np.ndarray  # sorted by start
    write_end: np.ndarray

    def link(self, ev: int) -> int | None:
        """The connection with the most bytes of kind ev (SEND on a primary, RECV on a replica)."""
        m = self.ev == ev
        if not m.any():
            return None
        totals = np.bincount(self.conn[m], weights=self.nbytes[m])
        return int(np.argmax(totals)) if totals.max() > 0 else None

    def totals(self, ev: int) -> np.ndarray:
        """Bytes of kind ev by connection."""
        m = self.ev == ev
        return np.bincount(self.conn[m], weights=self.nbytes[m]) if m.any() else np.zeros(0)

    def within(self, lo: int, hi: int) -> "NodeEvents":
        """Its events and calls in [lo, hi): where two windows overlap (a merged replica's window
        may span several of the primary's)."""
        m = (self.t >= lo) & (self.t < hi)
        s = (self.sync_start >= lo) & (self.sync_start < hi)
        w = (self.write_start >= lo) & (self.write_start < hi)
        return NodeEvents(self.t[m], self.conn[m], self.ev[m], self.nbytes[m], self.sync_start[s], self.sync_end[s],
                          self.write_start[w], self.write_end[w])

    def moved(self, conn: int, ev: int) -> tuple[np.ndarray, np.ndarray]:
        """(time, bytes moved so far) of conn's events of kind ev, in time order."""
        m = (self.conn == conn) & (self.ev == ev) & (self.nbytes > 0)
        return self.t[m], np.cumsum(self.nbytes[m])


def node_events(server, clock_offset_ns: int = 0) -> NodeEvents | None:
    """A window's events, its times moved to the primary's clock (clock_offset_ns: this node's
    clock minus the primary's); None when the window has no sized socket events."""
    if not server:
        return None
    w = decode_as(server, ServerWindow)
    req, origin = w.requests, w.start_mono_ns
    if origin is None or req is None or not req.bytes or len(req.bytes) != len(req.offset_ns):
        return None
    base = int(origin) - int(clock_offset_ns)
    t = np.asarray(req.offset_ns, dtype=np.int64) + base
    order = np.argsort(t, kind="stable")
    ss: list = []
    se: list = []
    ws: list = []
    we: list = []
    for start, dur, _tid, cause, state in w.blocked_timeline.events:
        if state != "call":
            continue
        if cause in SYNC_CALLS:
            ss.append(start + base)
            se.append(start + base + dur)
        elif cause == "aof_write":
            ws.append(start + base)
            we.append(start + base + dur)

    def sorted_pair(a, b):
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        o = np.argsort(a, kind="stable")
        return a[o], b[o]
    sync_start, sync_end = sorted_pair(ss, se)
    write_start, write_end = sorted_pair(ws, we)
    return NodeEvents(t[order], np.asarray(req.conn, dtype=np.int64)[order], np.asarray(req.event, dtype=np.int64)[order],
                      np.asarray(req.bytes, dtype=np.int64)[order], sync_start, sync_end, write_start, write_end)


def anchor(sent_t, sent_n, read_t, read_n) -> int | None:
    """x such that read_n + x counts the same bytes as sent_n (one clock for both): the value the
    most reads agree on (a read that drained the socket ends where a write ended), or None."""
    if not len(sent_t) or not len(read_t):
        return None
    i = np.searchsorted(sent_t, read_t, side="right") - 1
    ok = i >= 0
    if not ok.any():
        return None
    vals, counts = np.unique(sent_n[i[ok]] - read_n[ok], return_counts=True)
    k = int(np.argmax(counts))
    return int(vals[k]) if counts[k] >= MIN_AGREEING * ok.sum() else None


def candidates(sent_t, sent_n, read_t, read_n, guess_ns: int, around: int = NEIGHBOURS) -> list[int]:
    """Anchors to try when the two clocks are only guessed (guess_ns: the reader's clock minus the
    sender's): for each read, the differences between its end and the ends of the writes nearest
    it on the guessed clock (the last one before it and `around` more each side: a guess off by up
    to that many writes still finds the true anchor), the most frequent first. A stream of
    writes alike in size makes several agree (each one write apart); exchange() keeps the pair of
    directions that explains the shortest round trip."""
    if not len(sent_t) or not len(read_t):
        return []
    j = np.searchsorted(sent_t, read_t - guess_ns, side="right") - 1
    diffs = [sent_n[np.clip(j + k, 0, len(sent_n) - 1)] - read_n for k in range(-around, around + 1)]
    vals, counts = np.unique(np.concatenate(diffs), return_counts=True)
    order = np.argsort(-counts, kind="stable")[:2 * around + 1]
    return [int(vals[k]) for k in order]


def _matched(sent_t, sent_n, read_t, read_n, x) -> tuple[np.ndarray, np.ndarray]:
    """(send time, read time) of the reads that end exactly where a write ended."""
    target = read_n + x
    j = np.searchsorted(sent_n, target)
    j = np.minimum(j, len(sent_n) - 1)
    ok = sent_n[j] == target
    return sent_t[j[ok]], read_t[ok]


@dataclass
class Exchange:
    lower_ns: int       # the replica's clock minus the primary's is at least this (its acks' trips)
    upper_ns: int       # and at most this (the stream's trips)
    pairs: int          # stream reads and acks joined

    @property
    def offset_ns(self) -> int:
        return (self.upper_ns + self.lower_ns) // 2

    @property
    def error_ns(self) -> int:
        return (self.upper_ns - self.lower_ns + 1) // 2

    def meet(self, other: "Exchange") -> "Exchange | None":
        """Both windows' bounds at once (one pair of clocks), or None when they do not overlap."""
        lo, hi = max(self.lower_ns, other.lower_ns), min(self.upper_ns, other.upper_ns)
        return Exchange(lo, hi, self.pairs + other.pairs) if lo <= hi else None


def link_pair(primary: NodeEvents, replica: NodeEvents) -> tuple[int | None, int | None]:
    """(the primary's connection, the replica's) of the link: on the replica, the one it reads the most
    from (its clients send it little); on the primary, the one whose bytes sent come nearest what the replica
    read over its link, not the one it sends the most to: a client reading large replies (INFO from a
    monitor, valkeytrace's own memory sampler) may take more than a light stream."""
    rl = replica.link(RECV)
    sent = primary.totals(SEND)
    if rl is None or not sent.size or sent.max() <= 0:
        return primary.link(SEND), rl
    want = replica.totals(RECV)[rl]
    cand = np.flatnonzero(sent > 0)
    gap = np.abs(np.log(sent[cand] / want)) if want > 0 else -sent[cand]
    return int(cand[np.argmin(gap)]), rl


def exchange(primary: NodeEvents, replica: NodeEvents, guess_ns: int = 0) -> Exchange | None:
    """The replica's clock offset from the replication exchange (module docstring); guess_ns (the
    hosts' realtime clocks) only picks which writes came before which reads to anchor the offsets."""
    pl, rl = link_pair(primary, replica)
    if pl is None or rl is None:
        return None
    st, sn = primary.moved(pl, SEND)
    rt, rn = replica.moved(rl, RECV)
    at, an = replica.moved(rl, SEND)   # the replica's acks
    bt, bn = primary.moved(pl, RECV)
    uppers, lowers = [], []            # (bound, pairs) per anchor candidate
    for x in candidates(st, sn, rt, rn, guess_ns):
        s1, r1 = _matched(st, sn, rt, rn, x)
        if len(s1):
            uppers.append((int(np.min(r1 - s1)), len(s1)))
    for y in candidates(at, an, bt, bn, -guess_ns):
        a2, b2 = _matched(at, an, bt, bn, y)
        if len(a2):
            lowers.append((int(np.max(a2 - b2)), len(a2)))
    pairs = [(u - lo, lo, u, nu + nl) for u, nu in uppers for lo, nl in lowers if lo <= u]
    if not pairs:
        return None
    # the shortest round trip; streams alike in size explain it equally one write apart in both
    # directions (the offset a period off): the guess picks among those
    tight = min(w for w, *_ in pairs)
    _, lower, upper, n = min((p for p in pairs if p[0] <= 1.5 * tight + 10_000),
                             key=lambda p: abs((p[1] + p[2]) / 2 - guess_ns))
    return Exchange(lower, upper, int(n))


def _first_at_or_after(arr, t):
    """arr's first element >= t (arr sorted), -1 where none; t a scalar or an array."""
    if not len(arr):
        return np.full(np.shape(t), -1, dtype=np.int64)
    i = np.searchsorted(arr, t, side="left")
    return np.where(i < len(arr), arr[np.minimum(i, len(arr) - 1)], -1)


def _last_at_or_before(arr, t):
    """arr's last element <= t (arr sorted), -1 where none."""
    if not len(arr):
        return np.full(np.shape(t), -1, dtype=np.int64)
    i = np.searchsorted(arr, t, side="right") - 1
    return np.where(i >= 0, arr[np.maximum(i, 0)], -1)


@dataclass
class Link:
    """What one primary-replica pair's windows say (all times on the primary's clock, ns)."""
    lag_ns: np.ndarray             # per write: read by the primary -> its bytes' arrival on the replica
    lag_after_durable_ns: np.ndarray  # per write: the primary's sync's end -> the arrival on the replica
    early: int                     # link writes that reached the replica before they were durable
    checked: int                   # link writes the witness looked at
    chains: list                   # per probe: (set arrival, [P0..P8])
    undecomposed: int              # probes whose chain was out of order or incomplete
    joined: bool                   # the offsets joined (else the witness looked at the writes' times)
    dirty_window_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per write seen dirty
    dirty_checked: int = 0         # writes whose carrying link write was found
    # per write seen dirty: the lag it would have had had the stream waited for its durability (committed): the
    # primary's sync that made it durable, plus its link write's own transit, from its read by the primary
    committed_lag_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _carried(primary: NodeEvents, replica: NodeEvents):
    """The primary's link writes: (time, end offset, its arrival on the replica, the replica's read
    of its end offset, the two links). On loopback the data arrives inside the primary's write
    (before its return is traced): a write's arrival is the replica's last in (the previous
    write's return, its own]; when TCP held its bytes back (autocorking a small write behind one
    in flight), its first arrival after its return, before the read. Where most arrivals come
    after the write's return (two hosts, or two clocks aligned only within an error), the first
    after it."""
    pl, rl = link_pair(primary, replica)
    if pl is None or rl is None:
        return None
    st, sn = primary.moved(pl, SEND)
    rt, rn = replica.moved(rl, RECV)
    x = anchor(st, sn, rt, rn)
    if not len(st) or not len(rt):
        return None  # no traffic on the link in this window
    if x is None:  # the replica never drained its socket in the window (it lags): no join
        none = np.full(len(st), -1, dtype=np.int64)
        return st, sn, none, none, pl, rl
    k = np.searchsorted(rn + x, sn, side="left")
    read = np.where(k < len(rt), rt[np.minimum(k, len(rt) - 1)], -1)
    arr = replica.t[(replica.conn == rl) & (replica.ev == ARRIVE)]
    prev = np.concatenate(([np.iinfo(np.int64).min], st[:-1]))
    last, after = _last_at_or_before(arr, st), _first_at_or_after(arr, st + 1)
    inside = (last > prev) & (st - last <= LOOPBACK_NS)
    later = np.where((after >= 0) & ((read < 0) | (after <= read)), after, read)
    arrival = np.where(inside, last, later) if inside.mean() >= 0.5 else later
    return st, sn, arrival, read, pl, rl


def _early(primary: NodeEvents, st: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    """The witness, per link write: an AOF write ended before it and no sync that began after that write had
    ended by its arrival on the replica (or, not joined, by the primary's write)."""
    last_write = _last_at_or_before(np.sort(primary.write_end), st)
    never = np.iinfo(np.int64).max
    if len(primary.sync_start):  # the first end among the syncs that began after that write
        soonest = np.minimum.accumulate(primary.sync_end[::-1])[::-1]
        i = np.searchsorted(primary.sync_start, last_write, side="left")
        durable_at = np.where(i < len(soonest), soonest[np.minimum(i, len(soonest) - 1)], never)
    else:
        durable_at = np.full(len(st), never)
    return (last_write >= 0) & (durable_at > np.where(arrival >= 0, arrival, st))


def _chain(first: tuple, reply: int, carried: tuple, replica: NodeEvents, acks: tuple) -> list | None:
    """A WAITAOF probe's points P0..P8 (its SET's arrival, the primary's sync, the stream's arrival and read on
    the replica, the replica's AOF write and sync, its ack, the ack read, the reply), or None when one is
    missing or they are out of order. first: (P0, P1, the carrying link write) of its SET."""
    (p0, p1, j), (arrival, read), (r_acks_t, p_acks_t) = first, carried, acks
    if j is None or p1 < p0:
        return None
    p2, p3 = int(arrival[j]), int(read[j])
    p4 = int(_first_at_or_after(replica.write_start, p3))
    k = np.searchsorted(replica.sync_start, p4, side="left") if p4 >= 0 else len(replica.sync_start)
    p5 = int(replica.sync_end[k]) if k < len(replica.sync_start) else -1
    p7 = int(_last_at_or_before(p_acks_t, reply))
    p6 = int(_last_at_or_before(r_acks_t, p7)) if p7 >= 0 else -1
    points = [p0, p1, p2, p3, p4, p5, p6, p7, reply]
    return None if min(points) < 0 or any(b < a for a, b in zip(points, points[1:])) else points


def link(primary: NodeEvents, replica: NodeEvents) -> Link | None:
    carried = _carried(primary, replica)
    if carried is None:
        return None
    st, _sn, arrival, read, pl, rl = carried
    early_w = _early(primary, st, arrival)
    early = int(np.sum(early_w))
    # writes and probes
    sync_end = np.sort(primary.sync_end)
    rows = [r for r in durability.answered(primary.t.tolist(), primary.conn.tolist(), primary.ev.tolist(),
                                           primary.nbytes.tolist()) if r[0] != pl]
    lag, lag_d, chains, bad, dirty, checked, committed = [], [], [], 0, [], 0, []
    r_acks_t, _ = replica.moved(rl, SEND)
    p_acks_t, _ = primary.moved(pl, RECV)

    def carried_by(arrive, rd, reply):
        """(the primary's sync that made it durable, the link write that carried it) of a write: the first link
        write after the primary read it when that one left before the sync (the stream leaves at once), else the
        first after the sync (the stream held until durable)"""
        p1 = int(_last_at_or_before(sync_end, reply))
        j = int(np.searchsorted(st, rd, side="left"))
        if p1 >= arrive and not (j < len(st) and early_w[j] and 0 <= arrival[j] < p1):
            j = int(np.searchsorted(st, max(rd, p1), side="left"))
        return p1, (j if j < len(st) and arrival[j] >= 0 and read[j] >= 0 else None)

    prev = {}
    for conn, arrive, rd, reply, nb in rows:
        if nb == OK_REPLY:
            p1, j = carried_by(arrive, rd, reply)
            # dirty on the replica: the first link write after the primary read it carries it when the stream
            # leaves at once; it is early (the witness) and arrived before the sync that made the write durable
            j0 = int(np.searchsorted(st, rd, side="left"))
            if j0 < len(st) and arrival[j0] >= 0 and p1 >= arrive:
                checked += 1
                if early_w[j0] and arrival[j0] < p1:
                    dirty.append(p1 - int(arrival[j0]))
                    committed.append(p1 - rd + max(0, int(arrival[j0]) - int(st[j0])))
            if j is not None:
                lag.append(int(arrival[j]) - rd)
                if p1 >= arrive:
                    lag_d.append(int(arrival[j]) - p1)
            prev[conn] = (arrive, p1, j)
            continue
        first = prev.pop(conn, None)
        if nb != WAITAOF_REPLY or first is None:
            continue
        points = _chain(first, reply, (arrival, read), replica, (r_acks_t, p_acks_t))
        if points is None:
            bad += 1
        else:
            chains.append((points[0], points))
    return Link(np.asarray(lag, dtype=np.int64), np.asarray(lag_d, dtype=np.int64), early, int(len(st)), chains, bad,
                bool((read >= 0).any()), np.asarray(dirty, dtype=np.int64), checked, np.asarray(committed, dtype=np.int64))


def dirty_reads(primary: NodeEvents, write_ns: np.ndarray, recv_ns: np.ndarray) -> tuple[int, int]:
    """(reads checked, of which dirty) of replica reads, each a value's SET send and the read's reply (CLOCK_MONOTONIC).
    The value cannot be durable on the primary before the first sync that began after that send has ended (its AOF
    write came after the send, its sync after the write): a read answered before that is certainly of a value not yet
    durable. A read is checked when the window holds the syncs that could make it durable (its value sent after the
    window's first sync began, its reply read before the last one ended)."""
    ss, se = primary.sync_start, primary.sync_end
    if not len(ss) or not len(write_ns):
        return 0, 0
    soonest = np.minimum.accumulate(se[::-1])[::-1]
    i = np.searchsorted(ss, write_ns, side="left")
    checked = (i < len(ss)) & (write_ns >= ss[0]) & (recv_ns <= se.max())
    durable_not_before = soonest[np.minimum(i, len(ss) - 1)]
    return int(checked.sum()), int((checked & (recv_ns < durable_not_before)).sum())


COMPONENTS = ("primary_durability_us", "link_us", "replica_apply_us", "replica_aof_us", "replica_ack_us",
              "ack_read_us", "primary_reply_us")


def components(points: list[int]) -> dict[str, float]:
    """A probe's chain as its parts (µs): [P0 its SET's arrival on the primary, P1 the primary's sync
    that made it durable ends, P2 the stream bytes that carry it arrive on the replica, P3 the
    replica reads them, P4 writes its AOF, P5 its sync ends, P6 it writes its ack, P7 the primary
    reads the ack, P8 the WAITAOF's reply]: durability P0-P1, link P1-P2 (the primary's write
    included), apply P2-P4 (the replica's main thread reaching the bytes, and running them), AOF
    P4-P5, ack P5-P6 (the replica's wait for the primary's GETACK included), its way back P6-P7,
    the primary's reply P7-P8 (its own loop, its next sync included)."""
    return {name: (b - a) / 1e3 for name, a, b in zip(COMPONENTS, (points[0], points[1], points[2], points[4],
                                                                  points[5], points[6], points[7]),
                                                      (points[1], points[2], points[4], points[5], points[6],
                                                       points[7], points[8]))}
