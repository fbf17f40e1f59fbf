"""Filling the keyspace before a read-heavy run, so that every GET returns a value of the size.

The benchmark clients' -r N draws keys "key:%012d" from [0, N); we write exactly those, with
MSET batches pipelined (a few hundred round trips for 100k keys, even with appendfsync always).
"""
from __future__ import annotations

import os

BATCH_KEYS = 1000


def key_name(i: int) -> bytes:
    return b"key:%012d" % i


def fill(conn, keyspace: int, value_size: int) -> int:
    """SET key:000000000000 .. key:<keyspace-1> to random values of value_size bytes."""
    value = os.urandom((value_size + 1) // 2).hex()[:value_size].encode()
    pipe = conn.pipeline(transaction=False)
    pending = 0
    for start in range(0, keyspace, BATCH_KEYS):
        mapping = {key_name(i): value for i in range(start, min(start + BATCH_KEYS, keyspace))}
        pipe.mset(mapping)
        pending += 1
        if pending == 16:
            pipe.execute()
            pending = 0
    if pending:
        pipe.execute()
    return keyspace


def fill_keys(conn, keys, value_size: int) -> int:
    """SET each key:%012d of keys (a cluster shard's: one node owns them all) to a random value of value_size
    bytes, SETs pipelined (MSET would span slots)."""
    value = os.urandom((value_size + 1) // 2).hex()[:value_size].encode()
    pipe = conn.pipeline(transaction=False)
    for n, i in enumerate(keys, start=1):
        pipe.set(key_name(int(i)), value)
        if n % BATCH_KEYS == 0:
            pipe.execute()
    pipe.execute()
    return len(keys)
