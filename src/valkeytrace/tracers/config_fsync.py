"""record --cluster: the cluster's own fsyncs (clusterSaveConfig: nodes.conf's temporary file, then its directory,
on the main thread; valkey#2424), apart from the AOF's. Each node gets the kernel's sync record
(probes/vt_durable.bpf.c, tracepoints only: tracers/durable_bpf.py); a window's syncs on the node's main thread of
any file outside its AOF directory (nodes.conf's, the data directory) are the config's, each timed from the
sync's entry to its return. Needs a backend that loads eBPF; without it the recording has none."""
from __future__ import annotations

import os

import numpy as np

CONFIG_CAPACITY = 1 << 17  # sync records kept per node (8 MB of kernel memory); past it counted, not kept


class ConfigSyncs:
    """One probe per node (nodes: (port, pid, data dir, AOF directory name) each); begin()/end() a window."""

    def __init__(self, nodes: list[tuple[int, int, str, str]]):
        from valkeytrace.tracers.durable_bpf import DurableProbe

        self.nodes, self.probes, self.marks = nodes, [], [0] * len(nodes)
        try:
            for _, pid, _, _ in nodes:
                self.probes.append(DurableProbe(pid, CONFIG_CAPACITY))
        except BaseException:
            self.close()
            raise

    def _events(self, i: int) -> np.ndarray:
        from valkeytrace.workload.boundary import EVENT

        try:
            return self.probes[i].events(EVENT)[0]
        except Exception:  # a node killed (--failover): its probe's maps still read; anything else: nothing
            return np.zeros(0, dtype=EVENT)

    def begin(self) -> None:
        self.marks = [len(self._events(i)) for i in range(len(self.probes))]

    def end(self) -> dict:
        """runs[].config_fsync: the window's config syncs per node and in all."""
        rows, every = [], []
        for i, (port, pid, where, aofdir) in enumerate(self.nodes):
            ns = _config_syncs(self._events(i)[self.marks[i]:], pid, _aof_inodes(os.path.join(where, aofdir)))
            if ns.size:
                every.append(ns)
                rows.append({"port": port, "count": int(ns.size), "total_ms": round(float(ns.sum()) / 1e6, 3),
                             "max_ms": round(float(ns.max()) / 1e6, 3)})
        ns = np.concatenate(every) if every else np.zeros(0, dtype=np.int64)
        return {"count": int(ns.size), "total_ms": round(float(ns.sum()) / 1e6, 3),
                "max_ms": round(float(ns.max()) / 1e6, 3) if ns.size else 0.0, "nodes": rows}

    def close(self) -> None:
        for p in self.probes:
            try:
                p.close()
            except Exception:
                pass
        self.probes = []


def _aof_inodes(aof_dir: str) -> set[int]:
    try:
        return {os.stat(aof_dir).st_ino} | {e.inode() for e in os.scandir(aof_dir)}
    except OSError:
        return set()


def _config_syncs(ev: np.ndarray, main_tid: int, aof: set[int]) -> np.ndarray:
    """The durations (ns) of the main thread's syncs of files outside the AOF directory."""
    rec = ev.view(np.recarray)
    out: list[int] = []
    begun: tuple[int, int] | None = None
    for e in rec[rec.tid == main_tid]:
        if e.kind == 1:  # SYNC_BEGIN (csrc/shim_durable.h)
            begun = (int(e.ns), int(e.ino))
        elif e.kind == 2 and begun is not None:  # SYNC_END
            if begun[1] not in aof:
                out.append(int(e.ns) - begun[0])
            begun = None
    return np.array(out, dtype=np.int64)
