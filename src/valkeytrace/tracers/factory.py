"""The backend a record run asks for, resolved against what this machine can do, and its tracer."""
from __future__ import annotations

from valkeytrace.errors import VTUsageError
from valkeytrace.tracers.base import Tracer

BACKENDS = ("auto", "ebpf", "shim", "both", "none")


def resolve_backend(backend: str, attached: bool) -> tuple[str, str | None]:
    """(the backend to use, a note for the user when auto chose less than eBPF)."""
    from valkeytrace.tracers.bcc_load import unusable_reason

    if backend == "auto":
        reason = unusable_reason()
        if reason is None:
            return "ebpf", None
        if not attached:
            return "shim", f"eBPF unavailable ({reason}); using the shim backend"
        return "none", (f"eBPF unavailable ({reason}) and the shim cannot preload into a running server; "
                        "recording client-side results only")
    if backend in ("ebpf", "both"):
        reason = unusable_reason()
        if reason:
            raise VTUsageError(f"--backend {backend}: {reason}; run 'valkeytrace doctor', or use --backend shim")
    if backend in ("shim", "both") and attached:
        raise VTUsageError(f"--backend {backend} cannot trace a running server: the shim is loaded with "
                           "LD_PRELOAD at launch; use --backend ebpf with --attach")
    return backend, None


def make_tracer(backend: str, block_threshold_us: float = 100.0, inject: dict | None = None,
                aof_flush_probe: bool = False, loop_sample: bool = False, socket_writes: bool = False,
                delay_control: bool = False) -> Tracer:
    """The tracer; with delay_control (not for backend none), one whose fsync delay can be raised
    while the server runs (set_extra_fsync_delay): the shim's own region, or, under eBPF, a paused
    one loaded for that alone."""
    if backend == "none":
        from valkeytrace.tracers.null import NullTracer

        return NullTracer(inject)
    from valkeytrace.tracers.shim import ShimTracer

    if backend == "shim":
        return ShimTracer(inject, socket_writes=socket_writes)
    from valkeytrace.tracers import emulation
    from valkeytrace.tracers.ebpf import EbpfTracer

    control = emulation.delay_control() if delay_control and backend == "ebpf" else None
    try:
        ebpf = EbpfTracer(block_threshold_us=block_threshold_us, inject=inject, aof_flush_probe=aof_flush_probe,
                          loop_sample=loop_sample, socket_writes=socket_writes,
                          delay_control=control, shim_delays=delay_control)
    except BaseException:
        if control:
            control.close()  # its /dev/shm file
        raise
    if backend == "both":
        from valkeytrace.tracers.both import EbpfWithShimTracer

        return EbpfWithShimTracer(ebpf, ShimTracer(inject, socket_writes=socket_writes))
    return ebpf
