"""record --replicas N: N replicas of a server valkeytrace launched, on loopback, with the same
binary and settings (each its own directory and port, appendonly and appendfsync as the primary),
synced before the matrix, each traced by a tracer of its own (the primary's backend and fsync
delay), and stopped after. What the recording keeps of them: `nodes` (role, pid, port, version,
config), and per run `replicas[]` (each replica's tracer window, in the primary's shape)."""
from __future__ import annotations

import os
import time

from valkeytrace.errors import VTError

SYNC_TIMEOUT_S = 30.0


def _replication(client) -> dict:
    return client.info("replication")


class ReplicaSet:
    def __init__(self, primary, n: int, make_tracer, *, appendfsync: str, io_threads: int | None,
                 server_config: dict | None, binary: str | None, run_as=None, ready_timeout_s: float = 15.0,
                 env_each=None):
        """primary: the launched server; make_tracer(): a new tracer like the primary's; env_each(): more of each
        replica's environment, called once for each (LD_PRELOAD joins what the tracer preloads)."""
        from valkeytrace.server import process as srv

        self.primary = primary
        self.targets, self.tracers = [], []
        config = {k: v for k, v in (server_config or {}).items() if k not in ("port", "replicaof", "slaveof")}
        config["replicaof"] = f"127.0.0.1 {primary.port}"
        try:
            for _ in range(n):
                tracer = make_tracer()
                self.tracers.append(tracer)
                env = {**os.environ, **tracer.launch_env()}
                for k, v in (env_each() if env_each is not None else {}).items():
                    have = env.get(k) if k == "LD_PRELOAD" else None
                    env[k] = v if not have else have if v in have.split() else f"{have} {v}"
                if run_as:
                    tracer.chown_region(*run_as)
                self.targets.append(srv.EmbeddedServer(appendfsync=appendfsync, io_threads=io_threads,
                                                       server_config=config, binary=binary, env=env, run_as=run_as,
                                                       ready_timeout_s=ready_timeout_s))
        except BaseException:
            self.stop()
            raise

    def wait_synced(self, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """Every replica online and at the primary's offset (a full sync done), or a VTError."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = _replication(self.primary.client())
            offset = int(info.get("master_repl_offset", 0))
            states = [_replication(t.client()) for t in self.targets]
            if (int(info.get("connected_slaves", 0)) == len(self.targets)
                    and all(s.get("master_link_status") == "up" and int(s.get("slave_repl_offset", -1)) >= offset
                            for s in states)):
                return
            if time.monotonic() > deadline:
                links = ", ".join(str(s.get("master_link_status")) for s in states)
                raise VTError(f"--replicas {len(self.targets)}: the replicas did not sync with the primary within "
                              f"{timeout_s:.0f}s (links: {links})")
            time.sleep(0.1)

    def start(self) -> None:
        for tracer, target in zip(self.tracers, self.targets):
            tracer.start(target)

    def window_begin(self, requests: bool = False, observe: bool = False) -> None:
        for tracer in self.tracers:
            tracer.window_begin(requests=requests, observe=observe)

    def window_end(self) -> list:
        return [tracer.window_end() for tracer in self.tracers]

    def describe(self, fsync_delay: dict | None = None) -> list[dict]:
        from valkeytrace.recording.model import ServerInfo, decode_as

        return [{**node(decode_as(t.describe(), ServerInfo), "replica", fsync_delay), "primary_port": self.primary.port}
                for t in self.targets]

    def stop(self) -> None:
        for target in self.targets:
            try:
                target.stop()
            except Exception:
                pass
        for tracer in self.tracers:
            try:
                tracer.stop()
            except Exception:
                pass


def node(server, role: str, fsync_delay: dict | None = None) -> dict:
    """A node entry of the recording's `nodes` from a server's describe() (a recording.model.ServerInfo)."""
    return {"role": role, "pid": server.pid, "port": server.port, "version": server.version, "config": server.config,
            **({"fsync_delay": fsync_delay} if fsync_delay else {})}
