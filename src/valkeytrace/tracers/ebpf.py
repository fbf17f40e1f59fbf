"""The eBPF backend: loads probes/valkey_threads.bpf.c against one valkey-server and reads it.

bcc (Debian's python3-bpfcc, never PyPI's "bcc") is never imported in this process: a child compiles
(tracers/bcc_child.py) and hands back the programs' and maps' fds (tracers/bpf_fd.py). Only
tracepoints and uprobes are used: the kernels we target may have no kprobes. Their headers may
come from another kernel version, so no kernel struct layout comes from them: the two task_struct
fields read (pid, stack) are at offsets taken from the running kernel's BTF.

By default no syscall is traced at all: when the AOF is on ext4, fdatasync/fsync and AOF writes
come from ext4's own (raw) tracepoints, an AOF write told by the syscall number and fd in the
thread's saved registers; elsewhere both are timed by uprobe pairs on their call sites in the
server (tracers/sites.py). None of it runs for other syscalls; uprobes cost other processes nothing.

Everything is aggregated in kernel maps; a measured window is the difference of two snapshots
(taken at the window's edges), with off-CPU intervals still open at either edge cut at the edge.
Main-thread blocked intervals come through a ring buffer polled on a timer (no wakeups) and
drained by a C callback of the native core (csrc/events.c), never a Python call per record.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from valkeytrace import environment, system
from valkeytrace.errors import VTError
from valkeytrace.server import threads as thr
from valkeytrace.tracers import bcc_child, bpf_cost, ebpf_events, ebpf_pool, elf, probe_source, sampling, sites
from valkeytrace.tracers.base import Tracer
from valkeytrace.tracers.bcc_load import require_bcc
from valkeytrace.tracers.ebpf_plan import (LOOP_SYMBOL, MAIN_PROBE, SWITCH_TRACEPOINTS, SYSNR_CANDIDATES, Plan, aof_dir_of,
                                           call_source, cflags, extra_groups, plan, printable_program, sysnr_cache,
                                           sysnr_known, uprobes)
from valkeytrace.tracers.ebpf_window import assign_extra_slots, slot_tids, window_metrics
from valkeytrace.tracers.emulation import preload_env, shim_library

# a poll a second (a wakeup costs this VM 0.1-1 ms of CPU, docs/performance.md, stop 67); BUSY_POLL_S while
# request events are on or after a drain of BUSY_RECORDS (the ring buffer holds ~130K); threads and AOF fds
# refreshed when they changed, and every FULL_REFRESH_EVERY polls
POLL_INTERVAL_S, BUSY_POLL_S, BUSY_RECORDS, FULL_REFRESH_EVERY = 1.0, 0.25, 20_000, 10
LOOP_PERIOD_S = 1.0
# fraction of time beforeSleep is probed (record --loop-sample): each hit costs the main thread a
# few µs, and while attached nearly every (spinning) iteration is a hit, so the duty is roughly
# the main thread's cost; 0.5% still samples hundreds of iterations a second
# (docs/performance.md; $VALKEYTRACE_LOOP_DUTY, valkeytrace/environment.py)
DEFAULT_LOOP_DUTY = 0.005


class EbpfTracer(Tracer):
    """Per-thread tracing of one valkey-server with bcc; window metrics as recording dicts."""

    name = "ebpf"

    def __init__(self, block_threshold_us: float = 100.0, inject: dict | None = None, aof_flush_probe: bool = False,
                 loop_sample: bool = False, socket_writes: bool = False, delay_control=None,
                 shim_delays: bool = False):
        self.block_threshold_ns = int(block_threshold_us * 1000)
        self.extra_groups = extra_groups(aof_flush_probe, loop_sample, socket_writes)
        self.inject = inject
        self.delay_control = delay_control  # emulation.delay_control(): an fsync delay added at run time
        self.shim_library = None
        # the shim adds fsync delays (preloaded for that alone, or as the other backend of
        # --backend both): its wrappers are probed, so the delay is in the fsync time
        if inject or delay_control or shim_delays:
            self.shim_library = shim_library()
        self.bpf: Any = None
        self._refresh_lock = threading.Lock()
        self._seen: tuple | None = None  # (the server's tids, its AOF directory's mtime) at the last look
        self._stop = threading.Event()
        self._wake = threading.Event()  # the poller looks again now: stopping, or request events turned on
        self._poller: threading.Thread | None = None
        self._loop_probe: Any = None
        self.names: dict[int, str] = {}
        self.info: dict = {}
        self._requests_on = False
        self._aof_fds: set[int] = set()
        self._extra: dict[int, int] = {}
        self.untracked_threads: set[int] = set()
        self.loop_duty = environment.loop_duty(DEFAULT_LOOP_DUTY)
        self.write_duty = environment.aof_write_duty(sampling.AOF_WRITE_DUTY)  # observing windows only
        self._writes: sampling.WriteSampler | None = None
        self.pid: Any = None
        self.target: Any = None
        self.aof_dir: Any = None
        self._defines: dict = {}
        self._uprobes: list = []
        self._cost = bpf_cost.Cost()  # runs[].tracer.cost: the kernel's BPF statistics over each window
        self._attached = True
        self._tps: list = []
        self._raw_tps: list = []
        self._sampler: threading.Thread | None = None
        self._events: ebpf_events.Events | None = None  # the records' sources and their sink
        self._begin: Any = None
        self._pool_key: tuple | None = None  # set once started: the program is parked under it when stopped
        self._settled: tuple = ()  # (plan, call sites, why syscalls, idle cause): what a reuse takes over
        self._compile_s = 0.0

    # -- lifecycle ------------------------------------------------------------------------------
    def launch_env(self) -> dict:
        if not self.shim_library:
            return {}
        return preload_env(self.shim_library, self.delay_control and self.delay_control.path, self.inject)

    def chown_region(self, uid: int, gid: int):
        if self.delay_control:
            self.delay_control.chown(uid, gid)

    def set_extra_fsync_delay(self, ns: int):
        self.delay_control.set_extra_delay(ns)

    def start_paused(self, target):
        pass  # probes attach in resume(): before that the server runs untraced

    def resume(self, target):
        if self.bpf is None:
            self.start(target)
        else:
            self.set_attached(True)

    def pause(self, target):
        """Untraced after a traced stretch: the probes detached, the programs still loaded."""
        self.set_attached(False)

    def start(self, target):
        require_bcc()  # a VTError before anything starts when bcc is missing
        self.pid = target.pid
        self.aof_dir = aof_dir_of(target)
        binary = os.path.realpath(f"/proc/{self.pid}/exe")
        p = self.plan(binary, self.aof_dir, attached=getattr(target, "mode", "") == "attach")
        key = (binary, p.fstype, tuple(sorted(p.groups)), p.loop_addr, p.flush_probe, p.block_threshold_ns,
               self.shim_library)
        loaded = ebpf_pool.take(key)  # a program this process compiled for an earlier launch, or None
        # call sites disassembled (objdump, in the background) while the probes compile; "late": ext4's
        # tracepoints time the calls and the sysnr check passed here before, objdump only if it fails now
        wants_sites = loaded is None and "calls" in p.groups and "syscalls" not in p.groups
        late = wants_sites and p.fs_sync and "sched" in p.groups and sysnr_known()
        finder = sites.SiteFinder(binary) if wants_sites and not late else None
        t0 = time.monotonic()
        try:
            if loaded is None:
                call_sites, why_syscalls, idle = self._load(p, finder, binary if late else None)
                self._events = ebpf_events.Events(self.bpf, self._defines)
                if not p.switches:  # record --attach: the start-up check done, no program on every switch
                    ebpf_pool.detach_named(self.bpf, SWITCH_TRACEPOINTS)
            else:
                p, call_sites, why_syscalls, idle = self._reuse(loaded)
            self._loop_probe, self._uprobes, shim_probes = uprobes(binary, p, call_sites, self.shim_library,
                                                                   self.loop_duty)
            self._attach_uprobes()
        except VTError:
            self.stop()
            raise
        except Exception as exc:  # bcc raises bare Exception on compile/attach failures
            self.stop()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VTError(f"eBPF probes failed to load ({first}); run 'valkeytrace doctor'") from exc
        finally:
            finder is not None and finder.cancel()
        self.info = self._describe(p, binary, call_sites, shim_probes, idle, time.monotonic() - t0)
        self.info["compile_ms"] = round(self._compile_s * 1000, 1)  # 0: a program compiled for an earlier launch
        self.info["compile_peak_rss_mb"] = self.bpf.compile_peak_rss_mb  # the child's, not ours
        self.info["program_from"] = "reused" if loaded is not None else self.bpf.program_from
        if why_syscalls:
            self.info["call_sites_unusable"] = why_syscalls
        self._pool_key, self._settled = key, (p, call_sites, why_syscalls, idle)
        self.target = target
        self._refresh()
        self._poller = threading.Thread(target=self._poll, name="valkeytrace-ringbuf", daemon=True)
        self._poller.start()
        if self._loop_probe:
            self._sampler = threading.Thread(target=self._sample_loop, name="valkeytrace-loop", daemon=True)
            self._sampler.start()

    def _load(self, p: Plan, finder, late_binary: str | None = None) -> tuple[list, str | None, str | None]:
        """Compile and load the plan; settle where the calls are timed: (call sites to probe, why
        the syscalls time them instead, the idle cause's source). Without usable call sites the
        plan falls back to the syscall tracepoints and is compiled again (late_binary: see start())."""
        self._compile(p)
        idle = self._check_sysnr() if "sched" in p.groups else None
        if finder is None and late_binary and not (p.fs_sync and idle):
            finder = sites.SiteFinder(late_binary)
        # with the syscall number, ext4's tracepoints begin AOF writes too: no uprobe at all
        if finder is None or (p.fs_sync and idle):
            finder is not None and finder.cancel()  # now: its objdump would take a CPU from the attach
            return [], None, idle
        call_sites = finder.result()
        if p.fs_sync:
            call_sites = [c for c in call_sites if c.kind == "aof_write"]
        if sites.usable(call_sites, need_sync=not p.fs_sync):
            return call_sites, None, idle
        why = finder.error or "no fdatasync/fsync and AOF write call sites found in the binary"
        p.fall_back_to_syscalls()  # costlier, but measured
        self.bpf.cleanup()
        self._compile(p)
        return [], why, self._check_sysnr() if "sched" in p.groups else None

    def _describe(self, p: Plan, binary: str, call_sites: list, shim_probes: bool, idle, seconds: float) -> dict:
        """How the windows are measured: the recording's server.probe."""
        syscalls = "syscalls" in p.groups
        info = {"attach_ms": round(seconds * 1000, 1), "binary": binary,
                "loop_source": f"uprobe:{LOOP_SYMBOL}" if p.loop_uprobe else ("epoll_wait" if "loop" in p.groups
                                                                                else "INFO stats"),
                "call_source": call_source(syscalls, p.fs_sync, p.fstype, write_sites=bool(call_sites),
                                           shim_wrappers=shim_probes),
                "call_sites": [{"kind": c.kind, "function": c.function, "call": hex(c.call), "exit": hex(c.exit),
                                "exit_emulated": c.exit_emulated} for c in call_sites],
                "flush_probe": p.flush_probe, "shim_probes": shim_probes,
                "probe_groups": sorted(g for g in p.groups if g != "sched" or p.switches), "idle_cause": idle,
                "untimed": [] if syscalls else ["socket_write"],
                "block_threshold_ns": self.block_threshold_ns, "defines": self._defines}
        if self._loop_probe:
            info["loop_sample_duty"] = self.loop_duty
        return info

    def plan(self, binary: str | None, aof_dir: str | None, attached: bool = False) -> Plan:
        """The probe plan for this server binary and AOF directory (ebpf_plan.plan): what start()
        loads, and what record --print-probes prints."""
        return plan(extra_groups=self.extra_groups, block_threshold_ns=self.block_threshold_ns,
                    symbol=lambda sym: elf.symbol_address(binary, sym) if binary else None,
                    fstype=system.storage_of(aof_dir).get("fstype") if aof_dir else None,
                    fs_tracepoints_present=lambda fs, names: all(system.tracepoint_exists(fs, tp) for tp in names),
                    attached=attached)

    def printable_program(self, pid: int, binary: str | None, aof_dir: str | None) -> str:
        """The program and flags start() would compile for this server (record --print-probes)."""
        p = self.plan(binary, aof_dir)
        return printable_program(p.defines(), p.groups, pid)

    def _compile(self, p: Plan):
        t0 = time.monotonic()
        self._defines = p.defines()
        self.bpf = bcc_child.compile_program(probe_source(MAIN_PROBE).encode(), cflags(**self._defines),
                                             raw_functions=self.REQUEST_PROBES.values())
        self._compile_s += time.monotonic() - t0
        ebpf_pool.set_target(self.bpf, self.pid or 0)  # the tracepoints fire from the load on
        ebpf_pool.set_journal_caller(self.bpf)

    def _reuse(self, loaded: ebpf_pool.Loaded) -> tuple:
        """A parked program taken over: its maps zeroed, its tracepoints attached again."""
        self.bpf, self._defines, self._events = loaded.bpf, loaded.defines, loaded.events
        ebpf_pool.reset(loaded)
        ebpf_pool.set_target(self.bpf, self.pid)
        ebpf_pool.attach(self.bpf, loaded.tracepoints, loaded.raw_tracepoints)
        return loaded.plan, loaded.call_sites, loaded.why_syscalls, loaded.idle

    def _park(self) -> bool:
        """Detach everything and park the program for the next launch (ebpf_pool); False when it
        cannot be (a launch that failed to start): then it is unloaded."""
        if self._pool_key is None or self._events is None or not self._settled:
            return False
        try:
            if self._attached:
                if self._uprobes:
                    self._detach_uprobes()
                self._requests(False)
                tps, raw = ebpf_pool.detach(self.bpf)
            else:
                tps, raw = self._tps, self._raw_tps
            ebpf_pool.set_target(self.bpf, 0)
            self._events.discard(self.bpf)
        except Exception:
            return False
        p, call_sites, why, idle = self._settled
        return ebpf_pool.park(self._pool_key, ebpf_pool.Loaded(self.bpf, p, call_sites, why, idle, self._defines,
                                                               self._events, tps, raw, set(self._aof_fds)))

    def _check_sysnr(self) -> str | None:
        """Find where this kernel keeps a sleeping task's syscall number: one of ours sleeps in
        clock_nanosleep while the probe reads every candidate offset; the one that reads
        clock_nanosleep's number each time is stored for the probe. None when none holds (no
        idle cause then: such intervals count as "other")."""
        if not self._defines.get("TASK_STACK_OFFSET"):
            return None
        bpf = self.bpf
        hits, tid_table = bpf[b"check_hits"], bpf[b"check_tid"]
        rounds = 20

        def sleeper():
            tid_table.put(0, threading.get_native_id())
            for _ in range(rounds):
                time.sleep(0.001)
            tid_table.put(0, 0)

        t = threading.Thread(target=sleeper, name="valkeytrace-sysnr-check")
        t.start()
        t.join()
        counts = [hits.value(i) for i in range(len(SYSNR_CANDIDATES))]
        good = [i for i, c in enumerate(counts) if c >= rounds // 2]
        if len(good) != 1:
            return None
        bpf[b"sysnr_offset"].put(0, SYSNR_CANDIDATES[good[0]])
        system.write_json_cache(sysnr_cache(), {"offset": SYSNR_CANDIDATES[good[0]]})
        return f"syscall number at task stack +{SYSNR_CANDIDATES[good[0]]}"

    def _each_uprobe(self, fn, probes):
        """fn on every probe, in parallel: attaching one waits ~8 ms and detaching one ~0.1 s (an
        RCU grace period) while using almost no CPU, and a recording has ~30 call-site probes."""
        from concurrent.futures import ThreadPoolExecutor

        probes = list(self._uprobes if probes is None else probes)
        if len(probes) <= 1:
            for probe in probes:
                fn(probe)
            return
        with ThreadPoolExecutor(max_workers=min(32, len(probes)), thread_name_prefix="valkeytrace-uprobe") as pool:
            list(pool.map(fn, probes))

    def _attach_uprobes(self, probes=None):
        self._each_uprobe(lambda p: (self.bpf.attach_uretprobe if p.ret else self.bpf.attach_uprobe)(
            name=p.path.encode(), fn_name=p.fn.encode(), pid=self.pid, **p.where()), probes)

    def _detach_uprobes(self, probes=None):
        self._each_uprobe(lambda p: (self.bpf.detach_uretprobe if p.ret else self.bpf.detach_uprobe)(
            name=p.path.encode(), pid=self.pid, **p.where()), probes)

    def _sample_loop(self):
        """The beforeSleep uprobe, attached loop_duty of each LOOP_PERIOD_S (while attached)."""
        on_s = LOOP_PERIOD_S * self.loop_duty
        last = self.bpf[b"loop_last"]
        probe = [self._loop_probe]
        while not self._stop.is_set():
            if self._attached:
                last.put(0, 0)  # the first hit after attaching only starts an iteration
                try:
                    self._attach_uprobes(probe)
                    self._stop.wait(on_s)
                    self._detach_uprobes(probe)
                except Exception:
                    return  # the server is gone; the window reports what was sampled
            self._stop.wait(LOOP_PERIOD_S - on_s)

    def set_attached(self, on: bool):
        """Detach every probe (the programs stay loaded) or attach them again: for measuring the
        tracer's cost on one server, alternating, without recompiling."""
        bpf = self.bpf
        if on == self._attached:
            return
        self._attached = on
        if not on:
            self._tps, self._raw_tps = ebpf_pool.detach(bpf)
            self._detach_uprobes()
        else:
            ebpf_pool.attach(bpf, self._tps, self._raw_tps)
            self._attach_uprobes()

    def stop(self):
        self._cost.restore()  # this tracer's hold on the BPF statistics let go
        if self.delay_control:
            self.delay_control.close()
        self._stop.set()
        self._wake.set()
        if self._writes is not None:
            self._writes.stop()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
            self._sampler = None
        if self._poller is not None:
            self._poller.join(timeout=2)
            self._poller = None
        if self.bpf is not None and self._park():
            self.bpf, self._events = None, None
        if self.bpf is not None:
            try:
                if self._attached and self._uprobes:
                    try:
                        self._detach_uprobes()
                    except Exception:
                        pass  # cleanup() below detaches whatever is left, one by one
                events = self._events
                with events.lock if events is not None else contextlib.nullcontext():
                    self.bpf.cleanup()  # detaches uprobes and tracepoints, closes maps and programs
            finally:
                self.bpf = None
                events, self._events = self._events, None
                if events is not None:
                    events.free()

    # -- background work ----------------------------------------------------------------------
    def _refresh(self):
        """Thread names, slots and AOF fds, refreshed as threads appear and files rotate (from the
        poller and at window edges: one at a time)."""
        with self._refresh_lock:
            self._refresh_locked()

    def _refresh_locked(self):
        live = thr.list_threads(self.pid)
        self.names.update(live)
        fds = {fd for fd in thr.aof_fds(self.pid, self.aof_dir) if fd < 4096}
        table = self.bpf[b"aof_fds"]
        for fd in fds - self._aof_fds:
            table.put(fd, 1)
        for fd in self._aof_fds - fds:
            table.put(fd, 0)
        if fds != self._aof_fds and b"aof_inodes" in self.bpf.tables:
            self.bpf[b"aof_inodes"].clear()  # the inodes the probe learnt name these files, or freed ones
        self._aof_fds = fds
        # a thread whose tid - pid falls outside the direct range gets one of the extra slots
        extra, self.untracked_threads = assign_extra_slots(live, self.pid, self._extra)
        table = self.bpf[b"extra_slots"]
        for tid in set(self._extra) - set(extra):
            table.delete(tid)
        for tid, slot in extra.items():
            if self._extra.get(tid) != slot:
                table.put(tid, slot)
        if extra or self._extra:
            self.bpf[b"extra_count"].put(0, len(extra))
        self._extra = extra

    def slot_tids(self) -> dict:
        """{slot: tid} of every thread seen."""
        return slot_tids(self.names, self.pid, self._extra)

    def _consume(self, take: bool = False) -> bytes:
        """The ring buffer and the call logs drained into the native sink; take: its records, emptied."""
        bpf, events = self.bpf, self._events
        return events.consume(bpf, take) if bpf is not None and events is not None else b""

    def _changed(self) -> bool:
        """Whether the server's tids or its AOF directory's mtime (a rewrite's new file) changed since the last look."""
        try:
            now = (frozenset(os.listdir(f"/proc/{self.pid}/task")), os.stat(self.aof_dir).st_mtime_ns)
        except OSError:
            now = None
        seen, self._seen = self._seen, now
        return now is None or now != seen

    def _poll(self):
        system.lower_thread_priority()  # the ring buffer and the logs hold seconds of records: a late poll loses nothing
        n, wait = 0, POLL_INTERVAL_S
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            events = self._events  # it exists while the program is loaded
            if self._stop.is_set() or self.bpf is None or events is None:
                break
            try:
                before = events.records
                self._consume()
                busy = self._requests_on or events.records - before >= BUSY_RECORDS
                wait = BUSY_POLL_S if busy else POLL_INTERVAL_S
                n += 1
                if self._changed() or n % FULL_REFRESH_EVERY == 0:
                    self._refresh()
            except Exception:
                if self._stop.is_set():
                    break

    # -- windows --------------------------------------------------------------------------------
    REQUEST_PROBES = {"sock_recv_length": "on_sock_recv", "sock_send_length": "on_sock_send",
                      "sk_data_ready": "on_sk_data_ready"}

    def _requests(self, on: bool):
        """Time client requests (write-only windows) or not: the raw tracepoints are attached for the
        window only (they fire for every socket I/O on the host), and requests_on gates them."""
        if self.bpf is None or not self.info.get("defines", {}).get("TRACE_REQUESTS") or on == self._requests_on:
            return
        self.bpf[b"requests_on"].put(0, int(on))
        for tp, fn in self.REQUEST_PROBES.items():
            try:
                if on:
                    self.bpf.attach_raw_tracepoint(tp=tp.encode(), fn_name=fn.encode())
                else:
                    self.bpf.detach_raw_tracepoint(tp=tp.encode())
            except Exception:
                pass  # a kernel without one of them: the record says no per-write figures
        self._requests_on = on
        self._wake.set()  # request events come ~100K a second: polled every BUSY_POLL_S while on

    def window_begin(self, requests: bool = False, observe: bool = False):
        self._cost.edge()
        self._requests(requests)
        self._writes = writes = sampling.WriteSampler(self.bpf, self.slot_tids, self.write_duty if observe and not requests
                                                      else 1.0)
        self._refresh()
        self._consume(take=True)  # what came before the window
        writes.start()  # its first quarter from before the window's edge
        self._begin = ebpf_pool.read_snapshot(self)
        self._cost.begin(self.bpf)

    def window_end(self, end_mono_ns: int | None = None) -> dict:
        self._cost.stop()
        writes, self._writes = self._writes, None
        if writes is not None:
            writes.stop()  # every program attached again
        if end_mono_ns is not None:  # a server that ended just as the window opened: an empty window
            end_mono_ns = max(end_mono_ns, self._begin.mono_ns)
        end = ebpf_pool.read_snapshot(self, end_mono_ns)
        self._requests(False)
        events = self._consume(take=True)
        self._refresh()
        out = window_metrics(self._begin, end, self.pid, self.names, self.slot_tids(), [events], self.info)
        if writes is not None:  # a sampled window: the share of its AOF writes timed, and its uncertainty
            out["probe"].update(writes.sampled(self._begin, end, events, self.pid))
        return {**out, "tracer_cost": self._cost.end(self.bpf, self._uprobes)}
