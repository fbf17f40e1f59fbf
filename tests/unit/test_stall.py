"""A disk that stalls (--inject-fsync-delay 2ms,stall:1s/2.5s): the option's parsing, and the model's
answer where it is known: under the durable offload, writes keep coming during a stall and their replies
wait in the server, about rate x stall of them at the peak (Little's law), where fsync on the main thread
holds none."""
import pytest

from valkeytrace.errors import VTUsageError
from valkeytrace.pipeline.params import ClientCosts, Durability, Group, Params, Sampler, ServerCosts
from valkeytrace.pipeline.sim import simulate
from valkeytrace.tracers.emulation import describe_delay, parse_fsync_delay


def test_the_stall_is_parsed_with_or_without_a_delay():
    d = parse_fsync_delay("2ms,stall:1s/2.5s")
    assert (d["kind"], d["median_ns"], d["stall_ns"], d["stall_period_ns"]) == ("const", 2_000_000, 10**9, 2_500_000_000)
    assert d["env"] == "const:2000000;stall:1000000000/2500000000"
    alone = parse_fsync_delay("stall:300ms/1s")
    assert alone["kind"] == "none" and alone["env"] == "none;stall:300000000/1000000000"
    assert parse_fsync_delay("lognormal:4ms,0.3,stall:1s/5s")["env"] == "lognormal:4000000,0.3;stall:1000000000/5000000000"
    assert "one call 1 s longer in every 2.5 s" in describe_delay(d)
    assert "stall" not in parse_fsync_delay("4ms")
    for bad in ("2ms,stall:1s", "2ms,stall:0s/1s", "stall:1s/0ms", "2ms,stall:x/1s"):
        with pytest.raises(VTUsageError):
            parse_fsync_delay(bad)


def _params(mode: str, stall_us: float) -> Params:
    server = ServerCosts(read_us={"SET": 5.0}, write_us=3.0, deliver_us=3.0, exec_us={"SET": 2.0})
    return Params((Group("SET", 50, rate=5000.0, pool="grow"),), server, ClientCosts(3.0, 3.0),
                  Durability(mode, Sampler((2000.0,)), Sampler((5.0,)), stall_us=stall_us, stall_period_us=1_000_000.0),
                  aof_bytes_per_write=107.0, duration_s=1.5, warmup_s=0.2, drain_s=1.0)


def test_under_the_offload_the_replies_held_at_a_stall_are_rate_times_stall():
    r = simulate(_params("durable", 400_000.0), seed=3)
    assert 0.8 * 5000 * 0.4 <= r.held_peak <= 1.25 * 5000 * 0.4, r.held_peak
    calm = simulate(_params("durable", 0.0), seed=3)
    assert calm.held_peak < 0.1 * r.held_peak  # without the stall: a job's worth (2 ms at 5,000/s)
    assert simulate(_params("main", 400_000.0), seed=3).held_peak == 0  # fsync on the main thread holds nothing
