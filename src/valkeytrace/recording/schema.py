"""Structural validation of a recording document: every field a report, plot or export reads is
type- and range-checked here, so that a loaded recording renders or is refused with one sentence
(RecordingError), never crashes a reporter. Sizes and counts are bounded before use."""
from __future__ import annotations

from valkeytrace.errors import RecordingError
from valkeytrace.layout import HIST_BUCKETS
from valkeytrace.recording.document import DOCUMENT_FORMAT, OLDEST_READABLE, VERSION

MAX_ITEMS = 10_000_000  # no list in a recording is longer (events, distributions, runs)
NUM = (int, float)


class _Check:
    def __init__(self, name: str):
        self.name = name

    def fail(self, path: str, what: str):
        raise RecordingError(f"{self.name} is corrupt ({path}: {what})")

    def obj(self, v, path, optional=False) -> dict:
        if v is None and optional:
            return {}
        if not isinstance(v, dict):
            self.fail(path, "expected an object")
        return v

    def lst(self, v, path, optional=False) -> list:
        if v is None and optional:
            return []
        if not isinstance(v, list):
            self.fail(path, "expected a list")
        if len(v) > MAX_ITEMS:
            self.fail(path, "too many items")
        return v

    def sub_obj(self, parent: dict, key: str, path: str) -> dict:
        """An optional object member: absent or null becomes {} in the document (normalised)."""
        v = parent.get(key)
        if v is None:
            parent[key] = v = {}
        return self.obj(v, path)

    def sub_lst(self, parent: dict, key: str, path: str) -> list:
        """An optional list member: absent or null becomes [] in the document (normalised)."""
        v = parent.get(key)
        if v is None:
            parent[key] = v = []
        return self.lst(v, path)

    def num(self, v, path, optional=True, minimum=None):
        if v is None:
            if not optional:
                self.fail(path, "missing number")
            return v
        if isinstance(v, bool) or not isinstance(v, NUM) or v != v or v in (float("inf"), float("-inf")):
            self.fail(path, "expected a number")
        if minimum is not None and v < minimum:
            self.fail(path, f"below {minimum}")
        return v

    def int_(self, v, path, optional=True, minimum=None, maximum=None):
        if v is None:
            if not optional:
                self.fail(path, "missing integer")
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(path, "expected an integer")
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            self.fail(path, "out of range")
        return v

    def str_(self, v, path, optional=True):
        if v is None and optional:
            return v
        if not isinstance(v, str):
            self.fail(path, "expected a string")
        return v

    def bool_(self, v, path, optional=True):
        if v is None and optional:
            return v
        if not isinstance(v, bool):
            self.fail(path, "expected true/false")
        return v


def validate_document(doc, name: str = "recording") -> dict:
    c = _Check(name)
    c.obj(doc, "document")
    if doc.get("format") != DOCUMENT_FORMAT:
        c.fail("format", f"not {DOCUMENT_FORMAT}")
    c.int_(doc.get("version"), "version", minimum=OLDEST_READABLE, maximum=VERSION)
    c.str_(doc.get("label"), "label", optional=False)
    c.bool_(doc.get("complete"), "complete")
    for w in c.sub_lst(doc, "warnings", "warnings"):
        c.str_(w, "warnings[]", optional=False)
    _server_info(c, c.sub_obj(doc, "server", "server"))
    settings = c.sub_obj(doc, "settings", "settings")
    for key in ("get_clients", "set_clients", "write_clients", "repeat", "keyspace"):
        c.int_(settings.get(key), f"settings.{key}", minimum=0)
    client = c.sub_obj(doc, "client", "client")
    for key in ("name", "version", "path"):
        c.str_(client.get(key), f"client.{key}")
    place = c.sub_obj(client, "placement", "client.placement")
    c.str_(place.get("requested"), "client.placement.requested")
    for key in ("client_cpus", "server_cpus", "host_cpus"):
        for cpu in c.lst(place.get(key), f"client.placement.{key}", optional=True):
            c.int_(cpu, f"client.placement.{key}[]", optional=False, minimum=0, maximum=1 << 20)
    emu = c.sub_obj(doc, "emulation", "emulation")
    c.str_(emu.get("description"), "emulation.description")
    delay = c.sub_obj(emu, "fsync_delay", "emulation.fsync_delay")
    c.num(delay.get("median_ns"), "emulation.fsync_delay.median_ns", minimum=0)
    c.num(delay.get("sigma"), "emulation.fsync_delay.sigma", minimum=0)
    for i, run in enumerate(c.lst(doc.get("runs"), "runs")):
        _run(c, run, f"runs[{i}]")
    return doc


def _server_info(c: _Check, s: dict):
    for key in ("version", "appendfsync", "mode", "binary"):
        c.str_(s.get(key), f"server.{key}")
    c.int_(s.get("io_threads"), "server.io_threads", minimum=0)
    c.int_(s.get("pid"), "server.pid", minimum=0)
    c.bool_(s.get("bio_aof_offload"), "server.bio_aof_offload")
    c.bool_(s.get("appendonly"), "server.appendonly")
    c.sub_obj(s, "config", "server.config")


def _run(c: _Check, run, path: str):
    c.obj(run, path)
    c.str_(run.get("workload"), f"{path}.workload", optional=False)
    c.int_(run.get("value_size"), f"{path}.value_size", optional=False, minimum=1, maximum=1 << 31)
    c.int_(run.get("repeat"), f"{path}.repeat", minimum=0)
    c.str_(run.get("status"), f"{path}.status", optional=False)
    c.str_(run.get("error"), f"{path}.error")
    for key in ("window_start", "window_end", "started_at", "ended_at"):
        c.num(run.get(key), f"{path}.{key}")
    for op, res in c.sub_obj(run, "ops", f"{path}.ops").items():
        p = f"{path}.ops.{op}"
        c.obj(res, p)
        c.str_(res.get("role"), f"{p}.role")
        c.int_(res.get("clients"), f"{p}.clients", minimum=0)
        for key in ("tps", "p50_us", "p95_us", "p99_us", "mean_us", "min_us", "max_us", "started_at"):
            c.num(res.get(key), f"{p}.{key}", minimum=0)
        for row in c.sub_lst(res, "percentile_distribution", f"{p}.percentile_distribution"):
            if not isinstance(row, list) or len(row) != 3:
                c.fail(f"{p}.percentile_distribution", "rows are [percent, ms, count]")
            c.num(row[0], f"{p}.percentile_distribution[]", optional=False, minimum=0)
            c.num(row[1], f"{p}.percentile_distribution[]", optional=False, minimum=0)
        for row in c.sub_lst(res, "progress", f"{p}.progress"):
            if not isinstance(row, list) or len(row) != 3:
                c.fail(f"{p}.progress", "rows are [seconds, rps, mean_ms]")
            c.num(row[0], f"{p}.progress[]", optional=False)
            c.num(row[1], f"{p}.progress[]", optional=False)
            c.num(row[2], f"{p}.progress[]")
    server = run.get("server")
    if server is not None:
        _server_metrics(c, server, f"{path}.server")
    view = c.sub_obj(run, "server_view", f"{path}.server_view")
    for op, pct in c.sub_obj(view, "latencystats", f"{path}.server_view.latencystats").items():
        for k, v in c.obj(pct, f"{path}.server_view.latencystats.{op}").items():
            c.num(v, f"{path}.server_view.latencystats.{op}.{k}", optional=False)


def _hist(c: _Check, h, path: str):
    c.obj(h, path)
    count = c.int_(h.get("count"), f"{path}.count", optional=False, minimum=0)
    for key in ("sum_ns", "min_ns", "max_ns"):
        c.int_(h.get(key), f"{path}.{key}", optional=False, minimum=0, maximum=1 << 64)
    c.int_(h.get("bytes"), f"{path}.bytes", minimum=0, maximum=1 << 64)
    total = 0
    for pair in c.lst(h.get("buckets"), f"{path}.buckets"):
        if not isinstance(pair, list) or len(pair) != 2:
            c.fail(f"{path}.buckets", "entries are [index, count]")
        c.int_(pair[0], f"{path}.buckets[]", optional=False, minimum=0, maximum=HIST_BUCKETS - 1)
        total += c.int_(pair[1], f"{path}.buckets[]", optional=False, minimum=0, maximum=1 << 62)
    if total != count:
        c.fail(path, "bucket counts do not add up to count")


def _server_metrics(c: _Check, s, path: str, nested: bool = False):
    c.obj(s, path)
    c.str_(s.get("backend"), f"{path}.backend")
    c.int_(s.get("window_ns"), f"{path}.window_ns", optional=False, minimum=0)
    c.int_(s.get("main_tid"), f"{path}.main_tid", minimum=0)
    c.int_(s.get("lost_events"), f"{path}.lost_events", minimum=0)
    for i, t in enumerate(c.lst(s.get("threads"), f"{path}.threads")):
        tp = f"{path}.threads[{i}]"
        c.obj(t, tp)
        c.int_(t.get("tid"), f"{tp}.tid", optional=False, minimum=0)
        c.str_(t.get("name"), f"{tp}.name", optional=False)
        c.str_(t.get("role"), f"{tp}.role", optional=False)
        for call, h in c.sub_obj(t, "calls", f"{tp}.calls").items():
            _hist(c, h, f"{tp}.calls.{call}")
        for cause, by_state in c.sub_obj(t, "off_cpu_ns", f"{tp}.off_cpu_ns").items():
            for state, v in c.obj(by_state, f"{tp}.off_cpu_ns.{cause}").items():
                c.num(v, f"{tp}.off_cpu_ns.{cause}.{state}", optional=False, minimum=0)
        sched = c.sub_obj(t, "sched", f"{tp}.sched")
        for key in ("on_cpu_ns", "runqueue_ns"):
            if sched:
                c.int_(sched.get(key), f"{tp}.sched.{key}", optional=False, minimum=0)
    timeline = c.sub_obj(s, "blocked_timeline", f"{path}.blocked_timeline")
    for ev in c.sub_lst(timeline, "events", f"{path}.blocked_timeline.events"):
        if not isinstance(ev, list) or len(ev) != 5:
            c.fail(f"{path}.blocked_timeline.events", "events are [start, duration, tid, cause, state]")
        c.int_(ev[0], f"{path}.blocked_timeline.events[]", optional=False)
        c.int_(ev[1], f"{path}.blocked_timeline.events[]", optional=False, minimum=0)
        c.int_(ev[2], f"{path}.blocked_timeline.events[]", optional=False, minimum=0)
        c.str_(ev[3], f"{path}.blocked_timeline.events[]", optional=False)
        c.str_(ev[4], f"{path}.blocked_timeline.events[]", optional=False)
    req = c.sub_obj(s, "requests", f"{path}.requests")
    if req:
        cols = [c.lst(req.get(k), f"{path}.requests.{k}") for k in ("offset_ns", "conn", "event", "tid")]
        if len({len(col) for col in cols}) != 1:
            c.fail(f"{path}.requests", "its columns offset_ns, conn, event and tid differ in length")
        if any(not isinstance(v, int) or isinstance(v, bool) for col in cols for v in col[:1000]):
            c.fail(f"{path}.requests", "its columns hold integers")
    c.sub_obj(s, "probe", f"{path}.probe")
    loop = c.sub_obj(s, "eventloop", f"{path}.eventloop")
    for key in ("cycles", "duration_us") if loop else ():
        c.int_(loop.get(key), f"{path}.eventloop.{key}", optional=False, minimum=0)
    if s.get("shim") is not None and not nested:
        _server_metrics(c, s["shim"], f"{path}.shim", nested=True)
