"""The tracer interface every backend implements (ebpf, shim, both, none).

The recorder drives a tracer through one server's life: launch_env() before the server starts
(what the launch must carry, e.g. LD_PRELOAD), start() once it answers (or start_paused() and
then resume()/pause() around the untraced side of --measure-overhead), window_begin() and
window_end() around each measured run (window_end returns the run's `server` section, built by
recording.document.server_window, or None), set_extra_fsync_delay() between runs of
--fsync-sensitivity, stop() at the end (idempotent). metadata() goes into the recording's
`tracer`. Every method has a no-op default, so a backend writes only what it does.
"""
from __future__ import annotations

from valkeytrace import system
from valkeytrace.errors import VTError


class Tracer:
    name = "none"

    def launch_env(self) -> dict:
        """Environment a launched server needs (e.g. LD_PRELOAD); {} for none."""
        return {}

    def chown_region(self, uid: int, gid: int) -> None:
        """Hand any shared file the server maps to the user the server runs as."""

    def set_extra_fsync_delay(self, ns: int) -> None:
        raise VTError(f"the {self.name} tracer cannot add an fsync delay (record --fsync-sensitivity needs the "
                      "shim preloaded)")

    def start(self, target) -> None:
        """Trace target from now on."""

    def start_paused(self, target) -> None:
        """Get ready to trace target without tracing yet (resume() starts)."""

    def resume(self, target) -> None:
        """Trace (again), after start_paused() or pause()."""

    def pause(self, target) -> None:
        """Stop tracing for a while; resume() continues."""

    def window_begin(self, requests: bool = False, observe: bool = False) -> None:
        """A measured window opens; requests: time each client request too (the eBPF backend's
        request events, for a write-only cell's durability record); observe: no load of ours runs in
        it (the eBPF backend then times a sample of the AOF writes: tracers/sampling.py)."""

    def window_end(self, end_mono_ns: int | None = None):
        """The window closes (at end_mono_ns, CLOCK_MONOTONIC, when the server ended before now): its
        recording.model.ServerWindow (a dict), or None."""
        return None

    def stop(self) -> None:
        """Release everything (probes, regions, threads); safe to call twice."""

    def metadata(self) -> dict:
        """The recording's `tracer`: the backend and this process's peak RSS (KiB)."""
        return {"backend": self.name, "peak_rss_kb": system.peak_rss_kb()}
