"""Integration tests of the reference RPC (rpc/) over 127.0.0.1.

  * every procedure, both transports, network and native wire order, pool and inline
    servers, with sizes that take one fragment, several windows, or a multi-fragment reply;
    also the largest size the client accepts, one byte either side of every fragment edge,
    other PDU sizes, several client threads
  * test-only packet loss on both sides: every call succeeds and runs exactly once
  * the TRACE=0 build has no LTTng symbol left, the traced build has them
  * the recv wait mode (a blocking recvfrom instead of a select)

Bad input and peers that misbehave are test_rpc_errors.py's; a flood of hostile datagrams is
test_rpc_flood.py's.

rpc-client --json checks every result byte for byte itself (exit 1 on any mismatch).
Servers come from conftest.py's factories, which kill them at teardown whatever happens.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pdu import (
    FRAG_BODY,
    PROCS,
    frag_count,
    max_size,
    reply_bytes,
    request_bytes,
    window_count,
)

REPO = Path(__file__).resolve().parents[2]


# ================================================================== 1. every procedure

# (proc, size): one fragment; a request of several fragments and windows (24096 bytes);
# a reply of several fragments (maxresult 20000, echo 16000, concat 24096).
CASES = [
    ("null", 0), ("incr", 0), ("add", 0),
    ("maxarg", 1000), ("maxarg", 24096),
    ("maxresult", 1000), ("maxresult", 20000),
    ("sum", 100), ("sum", 6024),
    ("concat", 100), ("concat", 24096),
    ("echo", 4000), ("echo", 16000), ("echo", 24096),
    ("courier", 1000), ("courier", 24096),
    ("courier_oneway", 1000), ("courier_oneway", 24096),
    ("fixedarg", 4016), ("fixedarg", 24096),
]
CALLS, WARMUP = 40, 5
EXPECTED_RUNS = 1 + WARMUP + CALLS  # the first call, the warm-up, the measured calls


def test_cases_cover_every_procedure_and_fragment_shape(rpc_bin):
    """The matrix below really has every procedure, multi-window requests and multi-fragment replies."""
    help_text = subprocess.run([str(rpc_bin("rpc-client")), "--help"], capture_output=True, text=True,
                               timeout=10).stdout
    listed = re.search(r"--proc P\s+(.+)", help_text).group(1).split()
    assert listed == PROCS
    assert {p for p, _ in CASES} == set(PROCS)
    for p in PROCS:
        sizes = [s for q, s in CASES if q == p]
        assert any(frag_count(request_bytes(p, s)) == 1 and frag_count(reply_bytes(p, s)) == 1 for s in sizes), p
        if max_size(p):
            assert any(window_count(request_bytes(p, s)) >= 3 for s in sizes) or p == "maxresult", p
    assert frag_count(reply_bytes("maxresult", 20000)) > 1 and frag_count(reply_bytes("echo", 16000)) > 1


@pytest.fixture(scope="module")
def matrix_servers(rpc_server_module):
    """One server per mode, serving UDP and TCP, shared by the matrix tests."""
    return {"pool": rpc_server_module(executors=2), "inline": rpc_server_module(executors=0)}


@pytest.mark.parametrize("proc,size", CASES, ids=[f"{p}-{s}" for p, s in CASES])
@pytest.mark.parametrize("wire", ["network", "native"])
@pytest.mark.parametrize("mode", ["pool", "inline"])
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_every_proc(matrix_servers, rpc_client, transport, mode, wire, proc, size):
    srv = matrix_servers[mode]
    before = srv.stats()
    run = rpc_client(srv, transport=transport, proc=proc, size=size, calls=CALLS, warmup=WARMUP,
                     extra=["--wire", wire], timeout=60)
    r = run.assert_ok(CALLS)
    assert (r["transport"], r["proc"], r["size"], r["wire"]) == (transport, proc, size, wire)
    if proc == "incr":
        assert r["last_counter"] >= EXPECTED_RUNS
    # Every call reached the server and ran exactly once. Poll: one-way calls are not waited for,
    # and an executor counts a reply only after sending it, which may be after the client is done.
    replies = 0 if proc == "courier_oneway" else EXPECTED_RUNS
    after = srv.wait_stats(lambda st: st["executed"] - before["executed"] >= EXPECTED_RUNS
                           and st["replies_sent"] - before["replies_sent"] >= replies)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["requests"] == EXPECTED_RUNS, (delta, run.describe())
    assert delta["executed"] == EXPECTED_RUNS, (delta, run.describe())
    assert delta["bad_args"] == delta["malformed"] == delta["rejects_sent"] == 0, delta
    if proc == "courier_oneway":
        assert delta["oneway"] == EXPECTED_RUNS and delta["replies_sent"] == 0, delta
    else:
        assert delta["replies_sent"] >= EXPECTED_RUNS, delta
    if transport == "udp":
        windows = window_count(request_bytes(proc, size))
        # A request of w windows is acknowledged w - 1 times (more only if a wait timed out).
        assert delta["acks_sent"] >= EXPECTED_RUNS * (windows - 1), (delta, windows)
        if windows > 1:
            assert r["client_stats"]["acks"] >= CALLS * (windows - 1), r
        if frag_count(request_bytes(proc, size)) == 1:
            assert delta["fragments_stored"] == 0, delta
        else:
            assert delta["fragments_stored"] >= EXPECTED_RUNS * frag_count(request_bytes(proc, size)), delta
    else:
        assert delta["tcp_accepted"] == 1 and delta["tcp_bad_record"] == 0, delta
    assert srv.alive()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
@pytest.mark.parametrize("proc", [p for p in PROCS if max_size(p)])
def test_largest_size_the_client_accepts(matrix_servers, rpc_client, transport, proc):
    """rpc-client accepts --size up to proc_max_size(); the server must serve that size too."""
    srv = matrix_servers["pool"]
    size = max_size(proc)
    rpc_client(srv, transport=transport, proc=proc, size=size, calls=3, warmup=0, timeout=60).assert_ok(3)
    # One more is refused by the client itself, before any call.
    over = rpc_client(srv, transport=transport, proc=proc, size=size + 1, calls=1, warmup=0, timeout=30)
    assert over.returncode == 2 and "too large" in over.stderr, over.describe()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_untraced_build_serves(rpc_server, rpc_client, transport):
    """The TRACE=0 programs work too (the matrix above runs the traced ones)."""
    srv = rpc_server(trace=False)
    for proc, size in [("incr", 0), ("echo", 16000), ("maxarg", 24096), ("maxresult", 20000)]:
        rpc_client(srv, transport=transport, proc=proc, size=size, calls=20, warmup=2, trace=False,
                   timeout=60).assert_ok(20)


def test_client_and_server_count_their_sleeps(rpc_server, rpc_client):
    """rpc-client --json "switches" (the measured calls only) and the server's voluntary_switches: the
    sleeps a capture compares between its untraced and traced runs (collectors/capture.py
    sleeps_per_call). A client that waits in epoll_wait sleeps about once per wait, a busy-waiting
    one almost never; the server's count grows with the requests it waited for."""
    srv = rpc_server(trace=False)
    before = srv.stats()
    calls = 300
    sleeping = rpc_client(srv, proc="maxarg", size=8032, calls=calls, warmup=20, trace=False,
                          timeout=60).assert_ok(calls)
    busy = rpc_client(srv, proc="maxarg", size=8032, calls=calls, warmup=20, trace=False,
                      extra=["--wait", "busy"], timeout=60).assert_ok(calls)
    after = srv.stats()
    # 8032 bytes: an acknowledged first window, then the rest, then the reply; two waits a call.
    assert 0.5 <= sleeping["switches"]["voluntary"] / calls <= 2.5, sleeping["switches"]
    assert busy["switches"]["voluntary"] / calls < 0.1, busy["switches"]
    assert after["voluntary_switches"] - before["voluntary_switches"] >= calls // 2, (before, after)
    assert after["involuntary_switches"] >= before["involuntary_switches"]


def test_client_histogram_holds_every_measured_call(rpc_server, rpc_client):
    """rpc-client --json "rtt_hist": fixed-width bins from the fastest call's bin; its counts and the
    calls beyond the last bin add up to the measured calls, its first bin holds the fastest call and
    its last non-empty one the slowest (unless it is beyond); --hist-bin-ns 0 leaves it out."""
    srv = rpc_server(trace=False)
    calls = 400
    r = rpc_client(srv, proc="maxarg", size=4016, calls=calls, warmup=20, trace=False,
                   extra=["--hist-bin-ns", "250"], timeout=60).assert_ok(calls)
    h, rtt = r["rtt_hist"], r["rtt_ns"]
    assert h["bin_ns"] == 250 and h["from_ns"] % 250 == 0, h
    assert sum(h["counts"]) + h["above"] == calls, h
    assert h["counts"][0] > 0 and h["counts"][-1] > 0, h
    assert h["from_ns"] <= rtt["min"] < h["from_ns"] + 250, (h["from_ns"], rtt)
    if h["above"] == 0:
        assert h["from_ns"] + 250 * (len(h["counts"]) - 1) <= rtt["max"] < h["from_ns"] + 250 * len(h["counts"])
    p50_bin = (rtt["p50"] - h["from_ns"]) // 250
    assert sum(h["counts"][:p50_bin]) < calls / 2 <= sum(h["counts"][:p50_bin + 1]), (rtt["p50"], h)
    off = rpc_client(srv, proc="null", calls=20, warmup=2, trace=False, extra=["--hist-bin-ns", "0"],
                     timeout=60).assert_ok(20)
    assert "rtt_hist" not in off, off


def boundary_sizes(proc: str, nfrags: int = 8) -> list[int]:
    """For each of the first nfrags fragment edges, the largest size whose request (or reply)
    still ends on this side of it, and that size plus one."""
    top = min(max_size(proc), nfrags * FRAG_BODY + 8)
    sizes = {0, 1} if top else {0}
    for measure in (request_bytes, reply_bytes):
        for k in range(1, nfrags + 1):
            lo, hi = -1, top  # bisect: measure(lo) <= edge < measure(hi), measure grows with the size
            if measure(proc, top) <= k * FRAG_BODY:
                continue
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if measure(proc, mid) <= k * FRAG_BODY else (lo, mid)
            sizes.update(x for x in (lo, hi) if x >= 0)
    return sorted(sizes)


@pytest.mark.parametrize("wire", ["network", "native"])
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_fragment_boundaries(matrix_servers, rpc_client, transport, wire):
    """One byte either side of every fragment (and window) edge, for every procedure with a size."""
    srv = matrix_servers["pool"]
    tried = 0
    for proc in PROCS:
        for size in boundary_sizes(proc) if max_size(proc) else []:
            rpc_client(srv, transport=transport, proc=proc, size=size, calls=2, warmup=0, extra=["--wire", wire],
                       timeout=30).assert_ok(2)
            tried += 1
    assert tried > 50
    # The sizes really straddle the edges: a request of exactly one full fragment, and one byte more.
    assert {frag_count(request_bytes("echo", s)) for s in boundary_sizes("echo")} >= {1, 2, 3, 4, 8}


@pytest.mark.parametrize("max_pdu", [256, 1500, 9000, 65000])
def test_other_pdu_sizes(rpc_server, rpc_client, max_pdu):
    """Client and server agreeing on another --max-pdu: fragment and window arithmetic still holds."""
    srv = rpc_server(transport="udp", executors=2, extra=["--max-pdu", max_pdu])
    for proc, size in [("echo", 24096), ("maxresult", 20000), ("concat", 3000), ("sum", 6024)]:
        rpc_client(srv, proc=proc, size=size, calls=20, warmup=2, extra=["--max-pdu", max_pdu],
                   timeout=60).assert_ok(20)


@pytest.mark.parametrize("mode", ["pool", "inline"])
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_client_threads(matrix_servers, rpc_client, transport, mode):
    """Four client threads, each with its own binding, at once."""
    srv = matrix_servers[mode]
    before = srv.stats()
    rpc_client(srv, transport=transport, proc="echo", size=16000, calls=50, warmup=5,
               extra=["--threads", "4"], timeout=60).assert_ok(4 * 50)
    run = rpc_client(srv, transport=transport, proc="incr", calls=50, warmup=5, extra=["--threads", "4"], timeout=60)
    run.assert_ok(4 * 50)
    after = srv.stats()
    assert after["executed"] - before["executed"] == 2 * 4 * (1 + 5 + 50), (before, after)


# ================================================================== 4. loss

DROP = ["--drop-rate", "0.05"]


@pytest.mark.parametrize("executors,threads", [(2, 1), (0, 1), (2, 3)], ids=["pool", "inline", "pool-3-threads"])
def test_loss_incr_runs_exactly_once(rpc_server, rpc_client, executors, threads):
    """5% loss each way: every incr() succeeds and the counter shows each ran exactly once."""
    srv = rpc_server(transport="udp", executors=executors, extra=[*DROP, "--drop-seed", "11"])
    calls, warmup = 500, 10
    run = rpc_client(srv, proc="incr", calls=calls, warmup=warmup,
                     extra=[*DROP, "--drop-seed", "22", "--rexmit-ms", "5", "--threads", threads], timeout=90)
    r = run.assert_ok(threads * calls)
    total = threads * (1 + warmup + calls)  # the first call, the warm-up and the measured calls of each thread
    assert r["last_counter"] == total, run.describe()
    st = srv.stop()
    assert st["executed"] == st["requests"] == total, st
    # The loss really happened and was recovered from.
    assert r["client_stats"]["timeouts"] > 0 and r["client_stats"]["pings"] > 0, r
    assert st["dropped_by_test_option"] > 0 and st["pings"] > 0, st
    # Lost replies were sent again from the reply cache (a ping or a resent request), not run again.
    assert st["replies_sent"] > st["executed"], st


@pytest.mark.parametrize("executors", [2, 0], ids=["pool", "inline"])
@pytest.mark.parametrize("proc", ["maxarg", "echo"])
def test_loss_multi_window_calls(rpc_server, rpc_client, proc, executors):
    """5% loss each way on calls of 7 fragments in 3 windows (and, for echo, 7-fragment replies)."""
    assert frag_count(request_bytes(proc, 24096)) == 7 and window_count(request_bytes(proc, 24096)) == 3
    srv = rpc_server(transport="udp", executors=executors, extra=[*DROP, "--drop-seed", "33"])
    calls, warmup = 200, 5
    run = rpc_client(srv, proc=proc, size=24096, calls=calls, warmup=warmup,
                     extra=[*DROP, "--drop-seed", "44", "--rexmit-ms", "5"], timeout=120)
    r = run.assert_ok(calls)
    st = srv.stop()
    assert st["executed"] == st["requests"] == 1 + warmup + calls, st  # at most once, here too
    assert st["answered_from_cache"] + st["pings"] > 0, st
    assert st["duplicate_fragments"] > 0 or r["client_stats"]["retransmitted_frags"] > 0, (st, r)
    assert r["client_stats"]["timeouts"] > 0, r
    assert st["dropped_by_test_option"] > 0, st


# ================================================================== 5. symbols

def _symbols(path) -> tuple[str, str, str]:
    out = []
    for cmd in (["nm", str(path)], ["nm", "-D", str(path)], ["ldd", str(path)]):
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, (cmd, cp.stderr)
        out.append(cp.stdout)
    return tuple(out)


def test_untraced_build_has_no_lttng(rpc_bin):
    cp = subprocess.run(["make", "-C", str(REPO), "TRACE=0", "build/notrace/bin/rpc-server",
                         "build/notrace/bin/rpc-client"], capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    for name in ("rpc-server", "rpc-client"):
        nm, nm_dyn, ldd = _symbols(rpc_bin(name, trace=False))
        assert nm.strip(), f"{name}: nm shows no symbols at all (stripped?), so the check would prove nothing"
        assert [s for s in nm.splitlines() if "lttng" in s.lower()] == [], name
        assert [s for s in nm_dyn.splitlines() if "lttng" in s.lower()] == [], name
        assert "lttng" not in ldd.lower(), ldd
        # The same check finds them in the traced build, so it can fail.
        nm, nm_dyn, ldd = _symbols(rpc_bin(name, trace=True))
        assert any("lttng" in s.lower() for s in nm.splitlines()), name
        assert any("lttng" in s.lower() for s in nm_dyn.splitlines()), name
        assert "liblttng-ust" in ldd, ldd


# ================================================================== 6. the recv wait mode

RECV = ["--wait", "recv"]


@pytest.mark.parametrize("executors", [2, 0], ids=["pool", "inline"])
def test_recv_wait_serves_every_proc(rpc_server, rpc_client, executors):
    """--wait recv on both sides (sleep in a blocking recvfrom): every procedure, single and multi-fragment."""
    srv = rpc_server(transport="udp", executors=executors, extra=RECV)
    for proc, size in [("null", 0), ("incr", 0), ("maxarg", 24096), ("maxresult", 20000), ("add", 0),
                       ("sum", 1000), ("concat", 300), ("echo", 16000), ("courier", 400)]:
        run = rpc_client(srv, transport="udp", proc=proc, size=size, calls=50, warmup=2, extra=RECV)
        r = run.assert_ok(50)
        assert r["wait"] == "recv", r


def test_recv_wait_loss_incr_runs_exactly_once(rpc_server, rpc_client):
    """Loss recovery when both sides sleep in recvfrom: the receive timeout drives the retransmission."""
    srv = rpc_server(transport="udp", executors=0, extra=[*RECV, *DROP, "--drop-seed", "55"])
    calls, warmup = 300, 5
    run = rpc_client(srv, transport="udp", proc="incr", calls=calls, warmup=warmup,
                     extra=[*RECV, *DROP, "--drop-seed", "66", "--rexmit-ms", "5"], timeout=90)
    r = run.assert_ok(calls)
    assert r["last_counter"] == 1 + warmup + calls, run.describe()
    st = srv.stop()
    assert st["executed"] == 1 + warmup + calls, st
    assert r["client_stats"]["timeouts"] > 0, r


def test_recv_wait_server_refuses_tcp(rpc_bin):
    cp = subprocess.run([str(rpc_bin("rpc-server")), "--wait", "recv", "--transport", "both"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and "--wait recv needs --transport udp" in cp.stderr, cp.stderr
