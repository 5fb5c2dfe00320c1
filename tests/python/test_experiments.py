"""`rpcscope experiment NAME` on the local testbed, for real, each experiment reduced (few calls, few
threads, one or two rounds): a complete, well-formed table in which every system really ran, every
one of its runs made its calls and its own result checks passed, the paper's figures beside; nothing
left running in the hosts afterwards. Bad input fails before anything starts.

Safety: the testbed's addresses are in 198.18.0.0/15 inside namespaces the test creates; the module
holds the machine-wide testbed test lock (rpcscope.testbed.held_by_tests) and takes the testbed down
even when a test fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from helpers import REPO, processes_in_hosts, rpcscope, shared_testbed

PEERS = REPO / "build" / "peers" / "bin"

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "sockperf", "rpcbind", "perf")),
                       reason="needs iproute2, openssh-server, sockperf, rpcbind, perf (make bootstrap)"),
]


@pytest.fixture(scope="module")
def testbed():
    """The testbed and the peers built; one testbed test module at a time. The experiments change
    nothing on the testbed, so a healthy one already up is used as it is and left up (the test lock
    keeps anyone else's `testbed down` off it meanwhile); else this module brings one up and down."""
    if not (PEERS / "grpc-client").exists():
        subprocess.run(["make", "-C", str(REPO), "peers"], check=True, capture_output=True, timeout=900)
    def refused_while_down():
        p = rpcscope("experiment", "netwise", "--calls", "5", check=False)
        assert p.returncode == 2 and "testbed is down" in p.stderr and "rpcscope testbed up" in p.stderr, p.stderr

    yield from shared_testbed(refused_while_down)


def test_bad_input_fails_before_anything_starts():
    for args, words in [(["nosuch"], "no experiment 'nosuch'"), (["netwise", "--repeats", "0"], "--repeats 0"),
                        (["firefly", "--threads", "0"], "give 1 to 64 threads"),
                        (["dce-throughput", "--threads", "x"], "--threads 'x'"),
                        (["courier", "--calls", "0"], "--calls 0"),
                        (["netwise", "--markdown", "/nonexistent/dir/x.md"], "its directory does not exist")]:
        p = rpcscope("experiment", *args, check=False)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def check_cell(cell, runs, calls):
    """A cell that ran: every round made its calls (all threads'), every result checked, figures present."""
    label = f"{cell['system']} {cell['transport']} {cell['proc']} {cell['size']} x{cell['threads']}"
    assert cell["ok"] and "error" not in cell, (label, cell.get("error"))
    assert len(cell["rounds"]) == runs, label
    for r in cell["rounds"]:
        assert r["ok"] and r["errors"] == 0 and r["mismatches"] == 0, (label, r)
        if cell["system"] == "sockperf":
            assert r["calls"] > 0, label
        else:
            assert r["calls"] == calls, (label, r["calls"], calls)
        assert 0 < r["min_us"] <= r["p50_us"] <= r["max_us"] and r["calls_per_s"] > 0, (label, r)
    assert cell["p50_us"] > 0 and cell["calls_per_s"] > 0, label


def test_netwise_every_system_every_test(testbed, tmp_path):
    md = tmp_path / "netwise.md"
    p = rpcscope("experiment", "netwise", "--repeats", "1", "--calls", "30", "--warmup", "5", "--json",
                 "--markdown", str(md))
    r = json.loads(p.stdout)
    assert r["complete"] and r["failures"] == [] and r["repeats"] == 1 and r["idle"] == "poll"
    tests = [row["test"] for row in r["table"]["rows"]]
    assert tests == ["void", "add", "integer 100", "integer 1000", "string", "opaque 4000", "opaque 8000",
                     "opaque 16000"]
    for row in r["table"]["rows"]:
        assert set(row["today"]) == {"rpcscope udp", "tirpc udp", "sockperf udp", "rpcscope tcp", "tirpc tcp",
                                     "grpc tcp", "sockperf tcp"}
        for key, cell in row["today"].items():
            if key == "tirpc udp" and row["test"] == "opaque 16000":
                assert "8800" in cell["na"]            # libtirpc's UDP limit, as the paper's Sun had
                continue
            check_cell(cell, 1, 30)
        assert row["ratios"]["grpc tcp / rpcscope tcp"]["median"] > 0
        assert row["paper_ms"]["tcp_sun"] is not None
    void = r["table"]["rows"][0]
    assert void["paper_ms"] == {"udp_sun": 4.11, "udp_netwise": 4.37, "udp_apollo": 5.95, "tcp_sun": 5.01,
                                "tcp_netwise": 5.34}
    text = md.read_text()
    assert "rpcscope experiment netwise" in text and "opaque 16000" in text and "Sun udp" in text
    assert "FAILED" not in text
    assert processes_in_hosts() == []


def test_dce_throughput_threads_and_floor(testbed):
    p = rpcscope("experiment", "dce-throughput", "--repeats", "2", "--calls", "40", "--warmup", "5",
                 "--threads", "1,2", "--json")
    r = json.loads(p.stdout)
    assert r["complete"] and r["threads"] == [1, 2]
    rows = r["table"]["rows"]
    assert [row["threads"] for row in rows] == [1, 2]
    for row in rows:
        assert row["paper"]["null_rpc_per_s"] > 0 and row["paper"]["send4016_mbps"] > 0
        for key, v in row["today"].items():
            run_calls = 40 // row["threads"] * row["threads"]      # shared out among the threads
            check_cell(v["null"], 2, run_calls)
            check_cell(v["send4016"], 2, run_calls)
            assert v["send4016_mbps"] > 0 and v["null_seconds_per_1000"] > 0
    assert set(r["table"]["first_call"]) == {"rpcscope udp", "tirpc udp", "rpcscope tcp", "grpc tcp"}
    for k, v in r["table"]["floor_udp_1_thread"].items():
        assert v["calls_per_s_ratio"] > 0 and v["sockperf_calls_per_s"] > 0, k
    tp = r["table"]["throughput_4016"]
    assert [row["threads"] for row in tp["rows"]] == [1, 2]
    for row in tp["rows"]:
        assert set(row["cells"]) == {"rpcscope fixedarg 4016", "rpcscope maxarg 4016", "sockperf 4016 B"}
        for key, cell in row["cells"].items():
            check_cell(cell, 2, 40 // row["threads"] * row["threads"])
            assert cell["threads"] == row["threads"] and row["mbps"][key] > 0, key
        for key, v in row["ratio_to_sockperf"].items():
            assert v["median"] > 0, (row["threads"], key)
    for key, v in tp["peak"].items():                  # each system's best thread count, round by round
        assert v["mbps"] > 0 and v["threads"] in (1, 2) and len(v["threads_by_round"]) == 2, key
        assert key == "sockperf 4016 B" or v["ratio_to_sockperf_peak"] > 0, key
    assert processes_in_hosts() == []


def test_firefly_threads_and_processors(testbed, tmp_path):
    md = tmp_path / "firefly.md"
    p = rpcscope("experiment", "firefly", "--repeats", "1", "--calls", "20", "--warmup", "2", "--threads", "1,2",
                 "--json", "--markdown", str(md))
    r = json.loads(p.stdout)
    assert r["complete"]
    text = md.read_text()
    assert "Firefly Table I" in text and "Table X:" in text and "Table XI:" in text
    assert "FAILED" not in text and "tirpc one CPU" in text
    rows = r["table"]["table1"]
    assert [row["threads"] for row in rows] == [1, 2] and rows[1]["paper"]["null_rpc_per_s"] == 595
    for row in rows:
        for v in row["today"].values():
            for kind in ("null", "maxresult", "maxarg"):
                check_cell(v[kind], 1, 20 // row["threads"] * row["threads"])
            assert v["maxresult_mbps"] > 0 and v["maxarg_mbps"] > 0
    assert [t["system"] for t in r["table"]["table10"]] == ["rpcscope udp", "tirpc udp"]
    for t in r["table"]["table10"]:
        check_cell(t["one_cpu"], 1, 20)
        check_cell(t["two_cpus"], 1, 20)
    assert [x["threads"] for x in r["table"]["table11"]] == [1, 2]
    for xi in r["table"]["table11"]:
        assert all(v["one_cpu_mbps"] > 0 and v["two_cpus_mbps"] > 0 for v in xi["today"].values())
    assert processes_in_hosts() == []


def test_courier_transports_results_and_profile(testbed):
    p = rpcscope("experiment", "courier", "--repeats", "2", "--calls", "50", "--warmup", "5", "--json")
    r = json.loads(p.stdout)
    assert r["complete"] and r["transports"] == ["udp", "tcp"]
    rows = r["table"]["rows"]
    assert [(x["arg_bytes"], x["result"]) for x in rows] == [(s, res) for s in (0, 4, 400, 4000)
                                                             for res in ("yes", "no")]
    for row in rows:
        for t in ("udp", "tcp"):
            v = row["today"][t]
            check_cell(v["cell"], 2, 50)
            assert v["min_us"] <= v["avg_us"] <= v["max_us"] and v["sd_us"] >= 0
        assert row["tcp_over_udp"]["median"] > 0
    assert rows[0]["paper_ms"]["courier_ms"] == 96.5
    prof = r["table"]["profile"]
    assert set(prof) == {"udp courier", "udp courier_oneway", "tcp courier", "tcp courier_oneway"}
    for k, v in prof.items():
        assert "error" not in v, (k, v)
        total = v["send_pct"] + v["receive_pct"] + v["marshal_pct"] + v["other_pct"]
        assert v["send_pct"] > 0 and 99 <= total <= 101, (k, v)
    # A one-way call waits for nothing: its client receives nothing.
    assert prof["udp courier_oneway"]["receive_pct"] < prof["udp courier"]["receive_pct"]
    assert processes_in_hosts() == []
