"""Every environment variable valkeytrace reads, in one place (docs/environment.md lists them).

Knobs for experiments, not for everyday use: each has an option or a default that is right for
recording. Read when asked (not at import), so a test or a benchmark can set them per run.
The shim's own variables (VALKEYTRACE_SHM, VALKEYTRACE_FSYNC_DELAY) are set by valkeytrace for
the server it launches (tracers/emulation.py), never by a user.
"""
from __future__ import annotations

import os

KNOBS = {
    "VALKEYTRACE_PROBES": "eBPF probe groups to load instead of the defaults and the record options, comma "
                          "separated (calls, fs, sched, loop, flush, syscalls): for overhead experiments "
                          "(benchmarks/overhead.py --probes)",
    "VALKEYTRACE_LOOP_DUTY": "fraction of each second the beforeSleep uprobe of record --loop-sample is "
                             "attached (default 0.005)",
    "VALKEYTRACE_AOF_WRITE_DUTY": "fraction of each second an observing window (no load of ours) times AOF writes "
                                  "(tracers/sampling.py; default 0.25, 1: all of them)",
    "VALKEYTRACE_WINDOW_ACCEPT": "SHORT[,LONG]: the shares of --duration a closed-loop window may run short of and "
                                 "long past and be kept (LONG: SHORT when not given, `any`: no bound); one further "
                                 "off is measured again, up to 4 windows (default 0.075; recorded as "
                                 "settings.window_accept)",
    "VALKEYTRACE_RAW_SCHED": "0: no task_struct offsets from BTF, hence the regular sched_switch tracepoint and "
                             "no idle cause (default 1)",
    "VALKEYTRACE_CACHE": "where report keeps a comparison's what-if (the model's simulations) to render it again "
                         "at once: a directory, or 0 for none (default $XDG_CACHE_HOME/valkeytrace, else "
                         "~/.cache/valkeytrace)",
    "VALKEYTRACE_BPF_CACHE": "where the compiled eBPF probes are kept for the next process (tracers/bpf_cache.py): a "
                             "directory, or off for none (default bpf/ in VALKEYTRACE_CACHE's directory)",
}


def cache_dir() -> str | None:
    """The directory report caches what-if results in, or None (VALKEYTRACE_CACHE=0)."""
    value = os.environ.get("VALKEYTRACE_CACHE")
    if value == "0":
        return None
    if value:
        return value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "valkeytrace")


def bpf_cache_dir() -> str | None:
    """Where compiled probes are kept (tracers/bpf_cache.py), or None (VALKEYTRACE_BPF_CACHE=off, or no cache)."""
    value = os.environ.get("VALKEYTRACE_BPF_CACHE")
    if value is not None:
        return None if value.strip().lower() in ("", "off", "0", "no") else value
    base = cache_dir()
    return None if base is None else os.path.join(base, "bpf")


def probe_groups_override() -> set[str] | None:
    value = os.environ.get("VALKEYTRACE_PROBES")
    return {g.strip() for g in value.split(",") if g.strip()} if value else None


def loop_duty(default: float = 0.005) -> float:
    return _share("VALKEYTRACE_LOOP_DUTY", default)


def aof_write_duty(default: float) -> float:
    return _share("VALKEYTRACE_AOF_WRITE_DUTY", default)


def window_accept(default: float) -> tuple[float, float | None]:
    """(short, long) from VALKEYTRACE_WINDOW_ACCEPT=SHORT[,LONG] (long None: `any`), else (default, default)."""
    short, _, long = (os.environ.get("VALKEYTRACE_WINDOW_ACCEPT") or "").partition(",")
    first = _number(short, float("inf"))
    if first is None:  # unset, or SHORT not a share: the whole value ignored
        return default, default
    if long.strip().lower() == "any":
        return first, None
    second = _number(long, float("inf"))
    return first, first if second is None else second


def _share(name: str, default: float, most: float = 1.0) -> float:
    """The variable's value if it is a number in (0, most], else default."""
    share = _number(os.environ.get(name), most)
    return default if share is None else share


def _number(value: str | None, most: float) -> float | None:
    """value as a number in (0, most], else None."""
    try:
        share = float(value) if value and value.strip() else None
    except ValueError:
        return None
    return share if share is not None and 0 < share <= most else None


def raw_sched() -> bool:
    return os.environ.get("VALKEYTRACE_RAW_SCHED", "1") == "1"
