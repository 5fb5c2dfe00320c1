"""The parts of `rpcscope experiment` that need no testbed: the perf profile's split, medians, spreads
and round-by-round ratios, option parsing, the code sizes of the built programs, and the peers'
clients refusing bad options and reporting a server that is not there (loopback only)."""
from __future__ import annotations

import json
import pathlib
import socket
import subprocess

import pytest

from rpcscope.experiments import codesize, netwise, threads
from rpcscope.experiments.cli import parse_threads
from rpcscope.experiments.courier import classify
from rpcscope.experiments.systems import Result, supports
from rpcscope.experiments.tables import Cell, Spec, cell_text, ratio, spread_pct
from rpcscope.output import UserError

REPO = pathlib.Path(__file__).resolve().parents[2]
PEERS = REPO / "build" / "peers" / "bin"

REPORT = """# Samples: 2K of event 'cpu-clock'
#
# Children      Self  Symbol
# ........  ........  ......................
#
    99.00%     0.00%  [k] entry_SYSCALL_64
    60.00%     1.00%  [k] __x64_sys_recvfrom
    30.00%     0.50%  [k] __x64_sys_sendto
     8.00%     8.00%  [.] marshal_put_opaque
     2.00%     2.00%  [.] marshal_get_u32
     1.00%     1.00%  [.] main
"""


def result(p50, cps=1000.0, ok=True):
    return Result(system="rpcscope", transport="udp", proc="null", size=0, threads=1, calls=10, errors=0,
                  mismatches=0, min_us=p50 / 2, p50_us=p50, mean_us=p50, p90_us=p50, p99_us=p50, max_us=p50 * 2,
                  calls_per_s=cps, first_call_us=p50 * 3, ok=ok, error="" if ok else "call 3: mismatch")


def test_profile_split_adds_the_entries_children_and_marshalling_self_time():
    s = classify(REPORT)
    assert s == {"send_pct": 30.0, "receive_pct": 60.0, "marshal_pct": 10.0, "other_pct": 0.0}


def test_medians_spreads_and_ratios_within_rounds():
    a = Cell(spec=Spec("rpcscope", "udp", "null", 0), runs=[result(10), result(20), result(12)])
    b = Cell(spec=Spec("tirpc", "udp", "null", 0), runs=[result(20), result(20), result(36)])
    assert a.median("p50_us") == 12 and spread_pct([10, 10, 10]) == 0
    assert ratio(b, a) == (2.0, pytest.approx(1.4826 * 1.0 / 2.0 * 100))     # rounds: 2.0, 1.0, 3.0
    assert cell_text(a).startswith("12.0 ±")
    failed = Cell(spec=Spec("grpc", "tcp", "null", 0), runs=[result(10), result(10, ok=False)])
    assert not failed.ok and failed.error == "call 3: mismatch" and cell_text(failed) == "FAILED"
    na = Cell(spec=Spec("tirpc", "udp", "echo", 16000), runs=[], na=supports("tirpc", "udp", "echo", 16000))
    assert na.ok and "8800" in na.na and cell_text(na) == "n/a"
    assert supports("grpc", "udp", "null", 0) and supports("tirpc", "tcp", "echo", 16000) is None


def test_4016_throughput_each_system_at_its_own_best_thread_count():
    """Rows per thread count with ratios taken within rounds, and each round's best thread count
    against the same round's best of the floor; a round with a failed run has no peak."""
    cps = {"rpcscope maxarg 4016": {1: [100, 110], 2: [300, 280], 4: [250, 320]},
           "rpcscope fixedarg 4016": {1: [200, 200], 2: [400, 400], 4: [390, 380]},
           "sockperf 4016 B": {1: [200, 200], 2: [500, 350], 4: [400, 400]}}
    cells = {}
    for key, by_n in cps.items():
        for n, rates in by_n.items():
            spec = threads._floor_spec(key, n)
            cells[spec] = Cell(spec=spec, runs=[result(10, cps=c) for c in rates])
    tp = threads.throughput_4016(cells, [1, 2, 4])
    assert [r["threads"] for r in tp["rows"]] == [1, 2, 4]
    row1 = tp["rows"][0]
    assert row1["mbps"]["sockperf 4016 B"] == pytest.approx(200 * 4016 * 8 / 1e6)
    assert row1["ratio_to_sockperf"]["rpcscope maxarg 4016"]["median"] == pytest.approx(0.525)   # rounds .5, .55
    assert row1["ratio_to_sockperf"]["rpcscope fixedarg 4016"]["median"] == pytest.approx(1.0)
    pk = tp["peak"]
    assert pk["sockperf 4016 B"]["threads_by_round"] == [2, 4]
    assert pk["rpcscope maxarg 4016"]["threads_by_round"] == [2, 4]
    assert pk["rpcscope maxarg 4016"]["ratio_to_sockperf_peak"] == pytest.approx((300 / 500 + 320 / 400) / 2)
    assert pk["rpcscope fixedarg 4016"]["ratio_to_sockperf_peak"] == pytest.approx((0.8 + 1.0) / 2)
    spec = threads._floor_spec("sockperf 4016 B", 4)
    cells[spec].runs[1] = result(10, cps=400, ok=False)
    pk = threads.throughput_4016(cells, [1, 2, 4])["peak"]
    assert pk["sockperf 4016 B"]["threads_by_round"] == [2, None]
    assert pk["rpcscope maxarg 4016"]["ratio_to_sockperf_peak"] == pytest.approx(0.6)


def test_option_parsing_names_what_is_wrong():
    assert parse_threads("1-3,8") == [1, 2, 3, 8]
    for bad in ("0", "x", "1-100", ""):
        with pytest.raises(UserError):
            parse_threads(bad)
    assert [r[0] for r in netwise.select("void, opaque 16000")] == ["void", "opaque 16000"]
    with pytest.raises(UserError, match="unknown opaque 3"):
        netwise.select("void,opaque 3")


@pytest.mark.skipif(not (PEERS / "grpc-client").exists(), reason="the peers are not built (make peers)")
def test_code_sizes_of_every_system_and_side():
    sizes = codesize.measure()
    for system in ("rpcscope", "tirpc", "grpc"):
        for side in ("client", "server"):
            d = sizes[system][side]
            assert d["generated"] > 0 and d["libraries"] > 0, (system, side)
            assert d["total"] == d["application"] + d["generated"] + d["libraries"]
    assert any("libtirpc" in f for f in sizes["tirpc"]["client"]["library_files"])
    assert any("libgrpc++" in f for f in sizes["grpc"]["server"]["library_files"])
    assert not any("libc.so" in f for f in sizes["grpc"]["server"]["library_files"])


@pytest.mark.skipif(not (PEERS / "grpc-client").exists(), reason="the peers are not built (make peers)")
def test_peer_clients_refuse_bad_options_and_report_a_missing_server():
    for prog in ("tirpc-client", "grpc-client"):
        p = subprocess.run([PEERS / prog, "--proc", "nosuch"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "bad value for --proc" in p.stderr, p.stderr
    p = subprocess.run([PEERS / "grpc-client", "--transport", "udp"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--transport" in p.stderr
    with socket.socket() as s:                   # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([PEERS / "grpc-client", "--server", "127.0.0.1", "--port", str(port), "--calls", "5",
                        "--deadline-s", "1", "--json"], capture_output=True, text=True, timeout=60)
    d = json.loads(p.stdout)
    assert p.returncode == 1 and d["calls"] == 0 and d["errors"] == 1 and "no connection" in d["first_error"], p.stdout
