"""The recording's durability check (record --verify-durability kill|power-cut; runs[].durability_check), its
power-cut states and files: part of recording/model.py, which imports them (docs/recording-format.md)."""
from __future__ import annotations

from valkeytrace.recording.fields import NonNegInt, Record, _d, _l


class CutState(Record):
    """One state a power cut can leave (record --verify-durability power-cut), loaded and checked."""
    kept: dict[str, NonNegInt] = _d()  # each file present: the bytes kept (its durable boundary, or a torn cut)
    torn: str | None = None      # --torn: the file cut past its boundary in this state
    acked: NonNegInt = 0
    acked_missing: NonNegInt = 0
    examples: list[dict] = _l()


class DurableFile(Record):
    """A file of the server's data directory at the kill and what its syncs had made durable by the cut."""
    name: str                    # relative to the data directory
    size: NonNegInt = 0
    durable: dict[str, NonNegInt] = _d()  # by backend (ebpf, shim): bytes
    absent: list[str] = _l()     # the backends by which its name was never made durable (a directory fsync)


class ReplicaCut(Record):
    """A replica's state at the same power cut (record --replicas): its files at their durable boundaries."""
    port: NonNegInt = 0
    acked: NonNegInt = 0         # keys with an acknowledged SET (the clients', from the primary)
    acked_missing: NonNegInt = 0  # of which this replica's state lacks that value and every later one
    examples: list[dict] = _l()
    kept: dict[str, NonNegInt] = _d()
    files: list[DurableFile] = _l()
    boundary_from: str | None = None
    lost_window_ms: float | None = None


class AckedRun(Record):
    run: NonNegInt = 0           # its index in runs[]
    writes_acked: NonNegInt = 0  # acknowledged SETs its clients kept (a failed run's too: up to its end)
    keys: NonNegInt = 0          # keys it acknowledged a SET of
    unread: str | None = None    # why its clients' acknowledged writes could not be read (then nothing is claimed)


class DurabilityCheck(Record):
    acked: NonNegInt = 0         # keys with an acknowledged SET the clients kept (each key's floor)
    acked_missing: NonNegInt = 0  # of which the reloaded AOF lacks the floor's value and every later one
    writes_acked: NonNegInt | None = None  # acknowledged SETs in all (several per key)
    runs: list[AckedRun] = _l()  # the runs whose clients' acknowledged writes it checked (2026-12-07 on)
    examples: list[dict] = _l()  # a few missing: key, the acknowledged sequence, what the reload holds
    method: str | None = None    # kill or power-cut (record --verify-durability)
    how: str | None = None       # how it was checked, in words
    states: list[CutState] = _l()  # power-cut: one per state loaded (the boundary's first, then --torn's)
    lost_window_ms: float | None = None  # power-cut: an upper bound, the cut's moment minus the oldest missing key's floor
    files: list[DurableFile] = _l()  # power-cut: each file of the data directory and its durable bytes by backend
    boundary_from: str | None = None  # power-cut: the backend whose boundary built the states (ebpf, else shim)
    replicas: list[ReplicaCut] = _l()  # power-cut with --replicas: each replica's state at the same cut
    error: str | None = None     # why it could not be (then nothing is claimed)
    replica_reads_checked: NonNegInt | None = None  # keys a replica reader read a sequenced value of
    phantom_reads: NonNegInt | None = None  # of which the reload lacks the latest value read and every later one
    phantom_examples: list[dict] = _l()  # a few of them
