"""--backend none: the server is not traced; runs carry no server window."""
from __future__ import annotations

from valkeytrace.tracers.base import Tracer
from valkeytrace.tracers.emulation import preload_env, shim_library


class NullTracer(Tracer):
    """No tracer. With an fsync delay to inject, the shim is preloaded for the injection only."""

    name = "none"

    def __init__(self, inject: dict | None = None):
        self.inject = inject

    def launch_env(self) -> dict:
        return preload_env(shim_library(), None, self.inject) if self.inject else {}
