"""Emulated fsync latency: the --inject-fsync-delay and --fsync-sensitivity specs, and how the shim
library (csrc/shim.c) is preloaded to add them, whichever backend traces. The shim sleeps after
every real fsync/fdatasync returns; a report states the emulation (recording `emulation`)."""
from __future__ import annotations

import re
from pathlib import Path

from valkeytrace.errors import VTError, VTUsageError

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def shim_library() -> str:
    """The built shim, next to the _native module."""
    import valkeytrace._native as native

    here = Path(native.__file__).parent
    found = sorted(here.glob("_shim*.so"))
    if not found:
        raise VTError(f"the shim library is missing from {here}; reinstall valkeytrace (make setup)")
    return str(found[0])


def _duration_ns(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise ValueError(text)
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


def parse_fsync_delay(spec: str) -> dict:
    """'4ms' -> constant; 'lognormal:4ms,0.3' -> lognormal with median 4 ms, sigma 0.3; either (or nothing)
    followed by ',stall:1s/2.5s' -> a disk that stalls: once in every 2.5 s of wall time, one fdatasync 1 s
    longer ('2ms,stall:1s/2.5s'; 'stall:1s/2.5s' alone: only the stalls); with ',blocks-writes' anywhere, a
    write to a file waits while its emulated sync runs ('2ms,stall:3s/6s,blocks-writes')."""
    whole, stall = spec, None
    parts = [p.strip() for p in spec.split(",")]
    blocks = "blocks-writes" in parts  # a disk that blocks writes to a file while its sync runs (ext4 can)
    spec = ",".join(p for p in parts if p != "blocks-writes")
    m = re.fullmatch(r"(?:(.*),)?stall:([^/]+)/(.+)", spec.strip())
    try:
        if m:
            spec = (m.group(1) or "").strip()
            stall = (_duration_ns(m.group(2)), _duration_ns(m.group(3)))
            if stall[0] <= 0 or stall[1] <= 0:
                raise ValueError(whole)
        kind, ns, sig, env = _base_delay(spec) if spec else ("none", 0, 0.0, "none")
    except ValueError:
        raise VTUsageError(f"--inject-fsync-delay {whole!r}: expected a duration like 4ms or 500us, "
                           "or lognormal:MEDIAN,SIGMA (e.g. lognormal:4ms,0.3), optionally with ,stall:S/P "
                           "(e.g. 2ms,stall:1s/2.5s) and ,blocks-writes (4ms,blocks-writes)") from None
    if blocks and kind == "none" and not stall:
        raise VTUsageError(f"--inject-fsync-delay {whole!r}: blocks-writes blocks writes during an emulated sync: "
                           "give a delay or a stall with it (4ms,blocks-writes)")
    out: dict = {"kind": kind, "median_ns": ns, "sigma": sig, "spec": whole}
    if stall:
        env += f";stall:{stall[0]}/{stall[1]}"
        out.update(stall_ns=stall[0], stall_period_ns=stall[1])
    if blocks:
        env += ";blocks-writes"
        out.update(blocks_writes=True)
    out.update(env=env)
    return out


def _base_delay(spec: str) -> tuple[str, int, float, str]:
    """(kind, median ns, sigma, the shim's spec)"""
    if spec.startswith("lognormal:"):
        median, sigma = spec[len("lognormal:"):].split(",")
        ns, sig = _duration_ns(median), float(sigma)
        if ns <= 0 or not 0 <= sig <= 5:
            raise ValueError(spec)
        return "lognormal", ns, sig, f"lognormal:{ns},{sig}"
    ns = _duration_ns(spec[len("const:"):] if spec.startswith("const:") else spec)
    if ns <= 0:
        raise ValueError(spec)
    return "const", ns, 0.0, f"const:{ns}"


def describe_delay(inject: dict | None) -> str:
    if not inject:
        return ""
    ms = inject["median_ns"] / 1e6
    said = {"const": f"+{ms:g} ms per call", "lognormal": f"+lognormal(median {ms:g} ms, sigma {inject['sigma']:g}) "
            "per call", "none": ""}.get(inject["kind"], "")
    stall_ns, period_ns = inject.get("stall_ns"), inject.get("stall_period_ns")
    if stall_ns and period_ns:
        said += (", and " if said else "") + (f"one call {stall_ns / 1e9:g} s longer in every "
                                              f"{period_ns / 1e9:g} s (a disk that stalls)")
    if inject.get("blocks_writes"):
        said += "; a write to a file waits while its sync runs (blocks-writes)"
    return f"fsync latency emulated: {said}"


def parse_fsync_error(spec: str) -> str:
    """'eio@100' -> 'eio@100' (the 100th fsync/fdatasync fails with EIO); 'enospc@N' alike."""
    m = re.fullmatch(r"\s*(eio|enospc)@([1-9][0-9]{0,11})\s*", spec.lower())
    if not m:
        raise VTUsageError(f"--inject-fsync-error {spec!r}: expected eio@N or enospc@N (the Nth fsync fails), "
                           "e.g. eio@100")
    return f"{m.group(1)}@{int(m.group(2))}"


def describe_fsync_error(spec: str) -> str:
    kind, n = spec.split("@")
    return f"fsync failure injected: the {int(n):,}th fsync/fdatasync fails with {kind.upper()} (nothing synced)"


def parse_gather(spec: str) -> int:
    """--offload-gather '1ms' -> 1000000 (ns): 0 up to 1 s."""
    try:
        ns = _duration_ns(spec)
    except ValueError:
        ns = -1
    if not 0 <= ns <= 1_000_000_000:
        raise VTUsageError(f"--offload-gather {spec!r}: expected a duration from 0 to 1s, like 1ms or 500us")
    return ns


def parse_sensitivity(spec: str) -> tuple:
    """'1ms,2ms,4ms' -> (1000000, 2000000, 4000000): the added fsync delays, ascending."""
    try:
        levels = sorted({_duration_ns(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] <= 0:
        raise VTUsageError(f"--fsync-sensitivity {spec!r}: expected added delays like 1ms,2ms,4ms")
    return tuple(levels)


def describe_sensitivity(inject: dict | None, levels: tuple) -> str:
    """describe_delay, plus the added delays of --fsync-sensitivity runs."""
    base = describe_delay(inject)
    if not levels:
        return base
    added = ", ".join(f"+{ns / 1e6:g} ms" for ns in levels)
    extra = f"sensitivity runs add {added} per fsync/fdatasync (intervention, not a measured disk)"
    return f"{base}; {extra}" if base else f"fsync latency: {extra}"


def preload_env(library: str, shm_path: str | None, inject: dict | None) -> dict:
    env = {"LD_PRELOAD": library}
    if shm_path:
        env["VALKEYTRACE_SHM"] = shm_path
    if inject:
        env["VALKEYTRACE_FSYNC_DELAY"] = inject["env"]
    return env


def delay_control():
    """A shim region for adding an fsync delay while the server runs (record --fsync-sensitivity)
    under a backend other than the shim: paused, so the shim records nothing into it."""
    from valkeytrace.tracers.region import ShimRegion

    region = ShimRegion(0)
    region.set_paused(True)
    return region
