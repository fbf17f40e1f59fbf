"""The virtual offload (record --emulate-offload durable|early-ack): valkey#3381's mechanism
emulated by the preloaded shim (csrc/offload.c) on any build. This module makes its shared file
(statistics the shim counts, control valkeytrace writes), reads the server's own command table
into it before any load, checks the emulation can apply to the server, reads the counters at each
window's edges into each run's `offload` counters (docs/recording-format.md); reports derive the
figures from them (analysis/offload.py).
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np

from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.histogram import LatencyHistogram
from valkeytrace.layout import HIST_BUCKETS, HIST_DTYPE

MODES = ("durable", "early-ack", "ack-after-write")
MAGIC, VERSION, WAITED_MAX = 0x4F465456, 7, 8
STATE_RUNNING, STATE_DRAINING, STATE_DRAINED, STATE_FAILED = 1, 2, 3, 4
FAIL_KINDS = {1: "write", 2: "fdatasync"}
COUNTERS = ("jobs", "job_bytes", "offloaded_writes", "offloaded_syncs", "queued_bytes", "durable_bytes", "commands",
            "write_commands", "unknown_commands", "replies", "held_replies", "held_write_replies",
            "held_read_replies", "held_bytes", "released_replies", "dropped_replies", "early_replies",
            "witness_checked", "witness_overflow", "unsynced_conns", "blocked_deliveries", "jobs_waited_sum",
            "replica_links", "stream_bytes", "stream_held_bytes", "obuf_closed", "exit_held_replies",
            "shutdown_drains", "signals", "stream_dirty_bytes", "rejected_writes", "paused_reads", "paused_ns",
            "handoff_waits", "handoff_wait_ns", "postponed_writes", "forced_writes")
# what the server holds right now (read at any moment: the memory sampler's; never differenced)
GAUGES = ("held_now", "behind_now", "held_bytes_now", "dirty_keys_now", "pending_now")
OVERFLOW = {"none": 0, "pause": 1, "reject": 2}  # VT_OVERFLOW_* (csrc/offload_layout.h)
REPLICAS = {"immediate": 0, "committed": 1, "replica-blocking": 2}  # VT_REPLICAS_*: the stream to a replica's link
STATS_DTYPE = np.dtype([("magic", "<u4"), ("version", "<u4"), ("mode", "<u4"), ("hist_buckets", "<u4"),
                        ("state", "<u4"), ("fail_kind", "<u4"), ("fail_errno", "<u4"), ("table_entries", "<u4")]
                       + [(c, "<u8") for c in COUNTERS + GAUGES] + [("last_signal", "<u4"), ("design", "<u4")]
                       + [("jobs_waited", "<u8", (WAITED_MAX,)), ("job_ns", HIST_DTYPE), ("hold_ns", HIST_DTYPE),
                          ("hold_read_ns", HIST_DTYPE), ("postpone_ns", HIST_DTYPE),
                          ("main_write_ns", HIST_DTYPE)])
CMD_NAME, CMD_MAX = 40, 2048
CMD_ENTRY_DTYPE = np.dtype([("name", f"S{CMD_NAME}"), ("flags", "<u4"), ("first", "<u2"), ("step", "<u2"),
                            ("last_plus", "<u4"), ("pad", "<u4")])
OBUF_DTYPE = np.dtype([("hard_bytes", "<u8"), ("soft_bytes", "<u8"), ("soft_seconds", "<u8")])
CONTROL_DTYPE = np.dtype([("table_ready", "<u4"), ("nentries", "<u4"), ("gather_ns", "<u8"), ("max_pending", "<u8"),
                          ("overflow", "<u4"), ("replicas", "<u4"), ("logfile", "S256"),
                          ("obuf_normal", OBUF_DTYPE), ("obuf_replica", OBUF_DTYPE),
                          ("entries", CMD_ENTRY_DTYPE, (CMD_MAX,))])
LINK_DTYPE = np.dtype([("port", "<u4"), ("wake", "<u4"), ("sent", "<u8"), ("committed", "<u8")])
REPLICA_LINKS = 8
SHARED_DTYPE = np.dtype([("stats", STATS_DTYPE), ("control", CONTROL_DTYPE), ("links", LINK_DTYPE, (REPLICA_LINKS,))])
# VT_CMD_F_* (csrc/offload_layout.h)
F_WRITE, F_READONLY, F_WIDE_READ, F_BLOCKING, F_MOVABLE, F_CONTAINER, F_NOKEYS, F_DURABILITY = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80)
# the commands whose reply says something is durable (WAIT: on replicas; WAITAOF: in the AOF): a
# durable offload answers them only once what they wait for is durable, like a write
DURABILITY_COMMANDS = ("wait", "waitaof")
WRITING_KEY_FLAGS = {b"RW", b"OW", b"RM"}  # key-spec flags of a key the command may change

# what a report's header adds when the recording has replicas
REPLICAS_DESCRIPTION = {"immediate": "the stream to replicas leaves at once, as #3381 was reviewed (--offload-replicas "
                                     "immediate): a replica may serve writes not yet durable on the primary",
                        "committed": "the stream to replicas holds every byte until the AOF bytes queued before it are "
                                     "durable (--offload-replicas committed: the committed part of the backlog; a full "
                                     "sync's payload and its end wait alike)",
                        "replica-blocking": "the stream to replicas leaves at once and each replica holds replies to "
                                            "reads of keys written past the primary's committed offset (--offload-replicas "
                                            "replica-blocking: the offset read from the primary's shared file, where the "
                                            "sync-replication design would send REPLCONF COMMIT)"}
REPLICA_MODES = tuple(REPLICAS_DESCRIPTION)
# record --offload-design: #3381's thread of 2026-05-26 (csrc/offload_design.h; the first is the default)
DESIGN_DESCRIPTION = {"bio-write": "", # the mechanism DESCRIPTION says
                      "bio-write-block": "design bio-write-block: the main thread's hand-off waits while a job runs "
                                         "(#3381's option 2, the enqueue blocking)",
                      "main-write": "design main-write: the main thread writes the AOF, vt_offload fdatasyncs it; a write "
                                    "due while a sync runs is postponed (kept in memory) up to 2 s (#3381's option 1)"}
DESIGNS = tuple(DESIGN_DESCRIPTION)
DESCRIPTION = {"durable": "virtual offload (emulated #3381): the main thread's AOF write and fdatasync run on "
                          "the shim's vt_offload thread, replies to writes and reads of keys not yet durable held "
                          "until their batch is durable",
               "early-ack": "virtual offload (emulated #3381, early-ack): the main thread's AOF write and "
                            "fdatasync run on the shim's vt_offload thread, nothing held (SETs acknowledged "
                            "before their fsync)",
               "ack-after-write": "virtual offload, a fault to witness (ack-after-write): the durable offload's holds, "
                                  "each job's replies released once its bytes are written, its fdatasync on a thread "
                                  "of its own (vt_syncer) while the next jobs go on: a kill loses none of them, a "
                                  "power cut may"}


def check_usage(mode: str | None, appendfsync: str, attached: bool, has_command: bool) -> None:
    """One line, before anything starts, for what the emulation cannot do."""
    if not mode:
        return
    if attached:
        raise VTUsageError("--emulate-offload needs a server valkeytrace launches (the shim is preloaded); "
                           "it cannot apply to --attach")
    if appendfsync != "always" and not has_command:
        raise VTUsageError(f"--emulate-offload emulates #3381, which offloads appendfsync always; "
                           f"this server would run appendfsync {appendfsync}")


def command_flags(info: list) -> int:
    """VT_CMD_F_* of one entry of COMMAND's reply (name, arity, flags, first, last, step, ACL
    categories, tips, key specs, subcommands): what the server itself says of the command."""
    name, flags, first = _s(info[0]).lower(), {_s(f) for f in info[2]}, int(info[3])
    cats = {_s(c) for c in info[6]} if len(info) > 6 else set()
    specs = info[8] if len(info) > 8 else []
    subs = info[9] if len(info) > 9 else []
    spec_flags = set()
    for spec in specs:
        fields = dict(zip(spec[::2], spec[1::2]))
        spec_flags |= {bytes(f) if isinstance(f, (bytes, bytearray)) else str(f).encode()
                       for f in (fields.get(b"flags") or fields.get("flags") or [])}
    out = 0
    if "write" in flags or "may_replicate" in flags or spec_flags & WRITING_KEY_FLAGS:
        out |= F_WRITE
    if "readonly" in flags:
        out |= F_READONLY
    nokeys = first == 0 and not specs
    if nokeys:
        out |= F_NOKEYS
    if "readonly" in flags and "@keyspace" in cats and nokeys:
        out |= F_WIDE_READ
    if "blocking" in flags:
        out |= F_BLOCKING
    if "movablekeys" in flags:
        out |= F_MOVABLE
    if subs:
        out |= F_CONTAINER
    if name in DURABILITY_COMMANDS:
        out |= F_DURABILITY
    return out


def _s(x) -> str:
    return x.decode() if isinstance(x, (bytes, bytearray)) else str(x)


def command_table(reply: list) -> list[tuple[str, int, int, int, int]]:
    """(name, flags, first, last, step) for every command and subcommand of COMMAND's reply."""
    out = []
    for info in reply:
        out.append((_s(info[0]).lower(), command_flags(info), int(info[3]), int(info[4]), int(info[5])))
        for sub in (info[9] if len(info) > 9 else []):
            out.append((_s(sub[0]).lower(), command_flags(sub), int(sub[3]), int(sub[4]), int(sub[5])))
    return out


class OffloadStats:
    """The file the shim maps ($VALKEYTRACE_OFFLOAD_STATS): statistics it counts, control we
    write; made 0600 and exclusive in /dev/shm, removed on close."""

    def __init__(self, mode: str, gather_ns: int = 0, max_pending: int = 0, overflow: str = "none",
                 replicas: str = "immediate", design: str = "bio-write"):
        if mode not in MODES:
            raise VTUsageError(f"--emulate-offload {mode!r}: expected durable, early-ack or ack-after-write")
        self.mode, self.design = mode, design
        from valkeytrace.tracers.region import make_shared

        self.path, self.mm = make_shared("valkeytrace-offload", SHARED_DTYPE.itemsize)
        # the C structs' mirror as a record array: fields by attribute (SHARED_DTYPE, csrc/offload.h)
        self.shared = np.frombuffer(self.mm, dtype=SHARED_DTYPE, count=1).view(np.recarray)
        ctl = self.shared[0].control
        ctl.gather_ns, ctl.max_pending = gather_ns, max_pending
        ctl.overflow = OVERFLOW[overflow] if max_pending else 0
        ctl.replicas = REPLICAS[replicas]

    def chown(self, uid: int, gid: int):
        os.chown(self.path, uid, gid)

    def env(self) -> dict:
        return {"VALKEYTRACE_OFFLOAD": self.mode, "VALKEYTRACE_OFFLOAD_STATS": self.path,
                "VALKEYTRACE_OFFLOAD_DESIGN": self.design}

    def load_commands(self, client) -> int:
        """The server's own command table (COMMAND, through a valkey-py client), written for the
        shim before any load; and where the server logs (its exit line, should the offload fail).
        Returns the entries."""
        client.set_response_callback("COMMAND", lambda r, **kw: r)
        table = command_table(client.execute_command("COMMAND"))
        try:
            logfile = client.config_get("logfile").get("logfile") or ""
            where = client.config_get("dir").get("dir") or ""
        except Exception:
            logfile = where = ""
        if len(table) > CMD_MAX:
            raise VTError(f"--emulate-offload: the server has {len(table)} commands, the shim's table holds {CMD_MAX}")
        ctl = self.shared[0].control
        for cls, limit in obuf_limits(client).items():
            ctl[f"obuf_{cls}"] = limit
        entries = np.zeros(CMD_MAX, dtype=CMD_ENTRY_DTYPE)
        for i, (name, flags, first, last, step) in enumerate(table):
            entries[i] = (name.encode()[:CMD_NAME - 1], flags, first, max(step, 0), last + 0x8000, 0)
        ctl["entries"] = entries
        ctl["logfile"] = os.path.join(where, logfile).encode()[:255] if logfile else b""  # valkey runs in `dir`
        ctl["nentries"] = len(table)
        ctl["table_ready"] = 1  # last: the shim indexes the entries once it sees this
        return len(table)

    def snapshot(self) -> np.record | None:
        """The counters now (a copy), or None while the shim has not initialised the file."""
        s = self.shared[0].stats.copy()
        if int(s.magic) != MAGIC or int(s.version) != VERSION or int(s.hist_buckets) != HIST_BUCKETS:
            return None
        return s

    def gauges(self) -> dict[str, int] | None:
        """What the emulation holds in the server right now (GAUGES, and the AOF bytes it has queued and not
        yet written), or None before the shim set the file up."""
        s = self.shared[0].stats
        if int(s.magic) != MAGIC or int(s.version) != VERSION:
            return None
        out = {g: int(s[g]) for g in GAUGES}
        out["aof_queued_bytes"] = max(0, int(s.queued_bytes) - int(s.job_bytes))
        return out

    def state(self) -> tuple[int, int]:
        """(state, jobs): valkeytrace waits on a draining offload before it would kill the server."""
        s = self.shared[0].stats
        return int(s.state), int(s.jobs)

    def failure(self) -> str | None:
        """What failed on vt_offload (its write or fdatasync, with the errno), or None."""
        s = self.shared[0].stats
        if int(s.state) != STATE_FAILED:
            return None
        return f"the AOF {FAIL_KINDS.get(int(s['fail_kind']), 'call')} on vt_offload failed: {os.strerror(int(s['fail_errno']))}"

    def at_exit(self) -> dict:
        """What the emulation did as the server ended: its state, the drains on the server's own shutdown
        path, the replies still held (dropped with their connections), the signals the server got."""
        st = self.shared[0].stats
        if int(st.magic) != MAGIC:
            return {}
        names = {1: "running", 2: "draining", 3: "drained", 4: "failed"}
        sig = int(st.last_signal)
        return {"state": names.get(int(st.state), str(int(st.state))),
                "shutdown_drains": int(st.shutdown_drains), "held_replies_dropped": int(st.exit_held_replies),
                "signals": int(st.signals),
                "last_signal": signal.Signals(sig).name if sig in signal.valid_signals() else None,
                "obuf_closed": int(st.obuf_closed)}

    def close(self):
        from valkeytrace.tracers.region import close_shared

        del self.shared
        close_shared(self.mm, self.path)


def obuf_limits(client) -> dict:
    """{"normal" | "replica": (hard bytes, soft bytes, soft seconds)} from the server's own
    client-output-buffer-limit (CONFIG GET): the shim counts held replies against them."""
    try:
        raw = client.config_get("client-output-buffer-limit").get("client-output-buffer-limit") or ""
    except Exception:
        return {}
    return parse_obuf_limits(raw.decode() if isinstance(raw, bytes) else str(raw))


def parse_obuf_limits(text: str) -> dict:
    """'normal 0 0 0 slave 268435456 67108864 60 pubsub ...' -> {"normal": (0, 0, 0), "replica": (...)}."""
    parts, out = text.split(), {}
    for i in range(0, len(parts) - 3, 4):
        cls = {"normal": "normal", "slave": "replica", "replica": "replica"}.get(parts[i].lower())
        try:
            vals = tuple(int(x) for x in parts[i + 1:i + 4])
        except ValueError:
            continue
        if cls:
            out[cls] = vals
    return out


def check_engaged(pid: int, timeout_s: float = 5.0) -> None:
    """The emulation offloads the server's multi-part AOF (appendonlydir/*.incr.aof): refuse in
    one line when the launched server keeps none open (a single-file AOF, an older server)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = []
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.endswith(".incr.aof"):
                    return
                if target.endswith(".aof"):
                    found.append(os.path.basename(target))
        except OSError:
            pass
        if time.monotonic() > deadline:
            what = f"a single-file AOF ({found[0]})" if found else "no AOF file open"
            raise VTUsageError(f"--emulate-offload offloads a multi-part AOF (appendonlydir/*.incr.aof, Valkey 7.2+ "
                               f"and Redis 7.0+); this server has {what}: nothing would be offloaded")
        time.sleep(0.05)


def _hist(a, b) -> LatencyHistogram:
    return LatencyHistogram.from_bucket_counts(b.buckets - a.buckets, sum_ns=int(b.sum_ns - a.sum_ns),
                                               max_ns=int(b.max_ns))


def window(a: np.record | None, b: np.record | None) -> dict | None:
    """One run's figures: counters between two snapshots, the job and hold histograms."""
    if a is None or b is None:
        return None
    out: dict = {c: int(b[c] - a[c]) for c in COUNTERS}
    out["jobs_waited"] = [int(x) for x in b.jobs_waited - a.jobs_waited]
    for h in ("job_ns", "hold_ns", "hold_read_ns", "postpone_ns", "main_write_ns"):
        out[h] = _hist(a[h], b[h]).to_dict()
    return out
