"""--backend both: the eBPF probes and the shim on one server, side by side."""
from __future__ import annotations

from valkeytrace.tracers.base import Tracer


class EbpfWithShimTracer(Tracer):
    """--backend both: eBPF and the shim on the same server, one window each, side by side.

    The eBPF metrics are the cell's `server`; the shim's ride along under `server["shim"]` so
    reports can show both counts (a cross-check of the two measurement paths)."""

    name = "both"

    def __init__(self, ebpf_tracer, shim_tracer):
        self.ebpf, self.shim = ebpf_tracer, shim_tracer

    def launch_env(self) -> dict:
        return self.shim.launch_env()  # the region and any injected delay; ebpf probes the wrappers

    def chown_region(self, uid: int, gid: int):
        self.shim.chown_region(uid, gid)

    def set_extra_fsync_delay(self, ns: int):
        self.shim.set_extra_fsync_delay(ns)

    def start(self, target):
        self.shim.start(target)
        self.ebpf.start(target)

    def start_paused(self, target):
        self.shim.start_paused(target)

    def resume(self, target):
        self.shim.resume(target)
        self.ebpf.resume(target)

    def pause(self, target):
        self.shim.pause(target)
        self.ebpf.pause(target)

    def window_begin(self, requests: bool = False, observe: bool = False):
        self.shim.window_begin()
        self.ebpf.window_begin(requests)  # every AOF write: the cross-check compares the two backends' counts

    def window_end(self, end_mono_ns: int | None = None) -> dict:
        metrics = self.ebpf.window_end(end_mono_ns)
        metrics["shim"] = self.shim.window_end(end_mono_ns)
        return metrics

    def stop(self):
        try:
            self.ebpf.stop()
        finally:
            self.shim.stop()
