"""The open-loop client (record --rate) against set truths, on a real server:

- a server put to sleep (DEBUG SLEEP) for a known share of the window: every request due while it slept
  waits for the rest of the sleep, so the corrected percentiles are the ones that share implies (a
  closed loop would count each sleep once per client, not once per request due), and the backlog
  clears: the achieved rate is the offered one;
- a rate no client on this machine can send (its own CPU per request, ~15 µs, allows ~65K/s a core):
  achieved below offered, the report says SATURATED and keeps the late sends;
- a fixed pool of connections (the default) under always: answered at its connections over its service
  time (Little's law), saturated where a pool that grows is not."""
import socket
import subprocess
import threading
import time

import pytest

from valkeytrace.recording import format as recfmt
from vtcli import VT, report_json, vt

pytestmark = [pytest.mark.integration, pytest.mark.timed]


def _pauser(port: int, pause_s: float, gap_s: float, stop: threading.Event) -> list:
    """DEBUG SLEEP pause_s every pause_s + gap_s while the server is up; the moments it slept (wall clock)."""
    slept = []

    def loop():
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.settimeout(pause_s + 10)
                    arg = f"{pause_s:g}"
                    s.sendall(f"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${len(arg)}\r\n{arg}\r\n".encode())
                    t = time.time()
                    if s.recv(16).startswith(b"+OK"):
                        slept.append((t, time.time()))
            except OSError:
                pass
            stop.wait(gap_s)

    threading.Thread(target=loop, daemon=True).start()
    return slept


def test_pauses_give_the_corrected_percentiles_their_share_implies(tmp_path):
    port, rate, pause, gap = 7463, 1000, 0.5, 2.5
    out = tmp_path / "p.vtrace"
    rec = subprocess.Popen([VT, "record", "--workload", "read-heavy", "--sizes", "64", "--duration", "9", "--repeat",
                            "1", "--backend", "none", "--rate", str(rate), "--port", str(port), "--keyspace", "5000",
                            "--server-config", "enable-debug-command=yes", "-o", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    slept = _pauser(port, pause, gap, stop)
    _, err = rec.communicate(timeout=180)
    stop.set()
    assert rec.returncode == 0, err
    assert len(slept) >= 3, slept
    # the sleeps as the pauser saw them; one cut short by the server's stop after the window is not a sleep's length
    whole = [b - a for a, b in slept if b - a >= 0.8 * pause]
    measured = sum(whole) / len(whole)
    g = [c for c in report_json(out)["runs"][0]["cells"] if c["workload"] == "read-heavy"][0]
    assert g["load"]["mode"] == "open" and g["load"]["rate"] == rate
    o = g["ops"]["GET"]
    # the requests due while the server slept, each waiting its rest: the share of the window the sleeps
    # cover (three or four of them, by where the window falls against the pauser's cycle)
    run = next(r for r in recfmt.read(out)["runs"] if r["workload"] == "read-heavy")
    ws, we = run["window_start"], run["window_end"]
    share = sum(max(0.0, min(b, we) - max(a, ws)) for a, b in slept) / (we - ws)
    for key, q in (("p95_us", 0.95), ("p99_us", 0.99)):
        expected = measured * (1 - (1 - q) / share)
        assert 0.75 * expected * 1e6 <= o[key] <= 1.25 * expected * 1e6, (key, o[key], expected, o)
    assert o["p50_us"] < 5000  # most requests were due while it was awake
    assert abs(o["achieved_rate"] - rate) <= 0.01 * rate and o["saturated"] is False, o
    assert o["client_us_per_request"] and o["late"] is not None


def test_a_rate_past_what_can_be_sent_is_saturated_and_said(tmp_path):
    out = tmp_path / "s.vtrace"
    # a 1 s window, no GET-only passes (nothing here reads them): 8.7 s against 18-20 s for 2 s with them
    res = vt("record", "--workload", "read-heavy", "--sizes", "64", "--duration", "1", "--repeat", "1", "--backend",
             "none", "--rate", "1000000", "--connections", "grow", "--keyspace", "5000", "--no-demand-pass", "-o", out,
             timeout=240)
    assert res.returncode == 0, res.stderr
    o = [c for c in report_json(out)["runs"][0]["cells"] if c["workload"] == "read-heavy"][0]["ops"]["GET"]
    assert o["offered_rate"] == pytest.approx(1000000, rel=0.01)
    # the client sent 213K/s of 400K/s on a quiet VM while its queue kept every request it ever sent; with
    # the queue bounded (2026-12-05) it sent 362K/s of them on a fast day: 1M/s is past it either way
    assert o["saturated"] is True and o["achieved_rate"] < 0.9 * o["offered_rate"], o
    assert o["late"] > 0  # the client itself could not send them on time, and says so
    text = vt("report", out)
    assert text.returncode == 0 and "SATURATED" in text.stdout, text.stdout


def test_a_fixed_pool_under_always_is_held_to_its_connections_per_service_time(tmp_path):
    """10 connections, one GET in flight each, under appendfsync always with a 4 ms fsync: each GET's
    service spans the fsync cycles it waits through, so the pool answers about 10 per service time
    (Little's law, every connection busy), far below the 3,000/s offered: saturated, the rest held in
    the client and late. The same rate over a pool that grows is answered in full (the GETs due in a
    cycle are all read in the next): what saturated was the pool, not the server."""
    def one(pool: str) -> dict:
        out = tmp_path / f"{pool}.vtrace"
        res = vt("record", "--workload", "read-heavy", "--sizes", "64", "--duration", "2", "--repeat", "1",
                 "--backend", "none", "--rate", "3000", "--get-clients", "10", "--connections", pool,
                 "--inject-fsync-delay", "4ms", "--keyspace", "5000", "--no-demand-pass", "-o", out, timeout=240)
        assert res.returncode == 0, res.stderr
        cell = [c for c in report_json(out)["runs"][0]["cells"] if c["workload"] == "read-heavy"][0]
        return cell

    fixed = one("clients")
    assert fixed["load"]["pool"] == "fixed" and fixed["load"]["connections"] == 10, fixed["load"]
    o = fixed["ops"]["GET"]
    assert o["saturated"] is True and o["late"] > 0, o
    little = 10 / (o["service_p50_us"] / 1e6)
    assert 0.6 * little <= o["achieved_rate"] <= 1.5 * little, (o["achieved_rate"], little, o["service_p50_us"])
    grown = one("grow")["ops"]["GET"]
    assert grown["saturated"] is False and abs(grown["achieved_rate"] - 3000) <= 30, grown
