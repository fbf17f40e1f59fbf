"""What the server itself says about a measured window: INFO latencystats and commandstats, and
LATENCY LATEST when its latency monitor is on (a run's `server_view`). Context for the reports
(the server times command execution only), never a reason to lose a run."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoopCount:
    """INFO stats at one moment: the event loop's iterations, their time, the commands processed."""
    cycles: int
    duration_us: int
    commands: int


class ServerView:
    def __init__(self, server):
        self.server = server
        self.reset = False

    def begin(self):
        """Reset the server's statistics at the window's start, on servers we launched only."""
        self.reset = False
        if self.server.mode != "attach":
            try:
                self.server.client().config_resetstat()
                self.reset = True
            except Exception:
                pass

    def eventloop(self) -> LoopCount | None:
        """The server's own event-loop counters (INFO stats, valkey >= 7.2), None without them."""
        try:
            st = self.server.client().info("stats")
        except Exception:
            return None
        if "eventloop_cycles" not in st:
            return None
        return LoopCount(int(st["eventloop_cycles"]), int(st.get("eventloop_duration_sum", 0)),
                         int(st.get("total_commands_processed", 0)))

    def end(self) -> dict:
        """What the server itself believes: INFO latencystats (command execution time) and
        LATENCY LATEST (only when the server's latency monitor is enabled)."""
        view: dict = {"reset_at_window_start": self.reset, "latencystats": {}, "latency_latest": []}
        try:
            conn = self.server.client()
            for key, value in conn.info("latencystats").items():
                if key.startswith("latency_percentiles_usec_"):
                    view["latencystats"][key[len("latency_percentiles_usec_"):]] = {
                        k: float(v) for k, v in (value.items() if isinstance(value, dict) else [])}
            stats = conn.info("commandstats")
            view["commandstats"] = {k[len("cmdstat_"):]: {"calls": v.get("calls"), "usec_per_call": v.get("usec_per_call")}
                                    for k, v in stats.items() if k in ("cmdstat_get", "cmdstat_set")}
            blocking = reply_blocking(_info_debug(conn))
            if blocking is not None:
                view["reply_blocking"] = blocking
            threshold = conn.config_get("latency-monitor-threshold").get("latency-monitor-threshold")
            view["latency_monitor_threshold_ms"] = int(threshold) if threshold is not None else None
            if threshold not in (None, "0"):
                view["latency_latest"] = [[str(e[0]), int(e[1]), int(e[2]), int(e[3])]
                                          for e in conn.execute_command("LATENCY", "LATEST")]
        except Exception as exc:  # the view is context, never a reason to lose the run
            view["error"] = str(exc)
        return view


# valkey#3381's INFO debug fields (reply blocking behind the AOF offload); absent elsewhere
REPLY_BLOCKING_FIELDS = ("reply_blocking_enabled", "reply_blocking_read_blocked_count",
                         "reply_blocking_write_blocked_count", "reply_blocking_clients_waiting_ack",
                         "reply_blocking_uncommitted_keys", "reply_blocking_previous_acked_offset",
                         "reply_blocking_primary_repl_offset")


def _info_debug(conn) -> dict:
    try:
        return conn.info("debug")
    except Exception:  # a server without the section (Redis, older valkey): nothing to read
        return {}


def parse_info(text: str) -> dict:
    """INFO's text ("# Section" lines, "key:value" lines) as {key: value}, numbers as numbers."""
    out: dict = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value
    return out


def reply_blocking(info: dict | str) -> dict | None:
    """The reply_blocking_* fields of INFO debug (a #3381 build with bio-aof-offload-enabled), as
    {field without the prefix: number}, or None when the server has none of them."""
    if isinstance(info, str):
        info = parse_info(info)
    found = {k[len("reply_blocking_"):]: info[k] for k in REPLY_BLOCKING_FIELDS if k in info}
    return found or None
