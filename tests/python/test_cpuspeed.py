"""The CPU speed check: rpc-cpuspeed (rpc/cpuspeed.h) run for real, the capture's summary of
its JSON (collectors/capture.py cpu_speed_summary), the lost shares over a capture's checks
(analysis/cpuspeed.py) on hand-made checks with known answers, and the goals' verdict that cites them."""
import json
import subprocess

import pytest

from rpcscope.analysis.cpuspeed import cpu_losses, describe, describe_pace, pace_response, worst_loss
from rpcscope.collectors.capture import cpu_speed_summary, run_pace_ns


def _run(rpc_bin, *args, timeout=30):
    return subprocess.run([str(rpc_bin("rpc-cpuspeed", False)), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_rpc_cpuspeed_for_real(rpc_bin):
    cp = _run(rpc_bin, "--cpu", "0,1", "--slices", "20", "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert d["slices"] == 20 and d["slice_iterations"] == 500000 and d["bounded"] is False
    assert [c["cpu"] for c in d["cpus"]] == [0, 1]
    for c in d["cpus"]:
        s = sorted(c["slice_ns"])
        assert c["slices"] == len(s) == 20 and s[0] > 0
        # the figures are the slices' own order statistics (the lower middle one for p50, as bench.c)
        assert (c["min_ns"], c["p50_ns"], c["p90_ns"], c["max_ns"]) == (s[0], s[9], s[17], s[-1])
        summary = cpu_speed_summary(c)
        assert summary["sum_ns"] == sum(s) and "slice_ns" not in summary
    table = _run(rpc_bin, "--cpu", "1", "--slices", "5")
    assert table.returncode == 0 and "max/min" in table.stdout and len(table.stdout.splitlines()) == 3
    assert 0 <= float(table.stdout.splitlines()[2].split()[-1]) < 100        # lost_%


def test_rpc_cpuspeed_stops_at_its_bound(rpc_bin):
    cp = _run(rpc_bin, "--cpu", "0", "--slices", "100000", "--max-seconds", "0.05", "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert d["bounded"] is True and 0 < d["cpus"][0]["slices"] < 100000 and d["seconds"] < 2


@pytest.mark.parametrize("args, expect", [
    (["--cpu", "0,0"], "given twice"),
    (["--cpu", "x"], "--cpu"),
    (["--slices", "0"], "out of range"),
    (["--slice-iterations", "10"], "out of range"),
    (["--max-seconds", "0"], "out of range"),
    (["stray"], "stray"),
])
def test_rpc_cpuspeed_bad_options(rpc_bin, args, expect):
    cp = _run(rpc_bin, *args)
    assert cp.returncode == 2 and cp.stdout == "" and expect in cp.stderr, (cp.returncode, cp.stderr)


def test_rpc_cpuspeed_names_a_cpu_it_cannot_pin(rpc_bin):
    cp = _run(rpc_bin, "--cpu", "0,1023")
    assert cp.returncode == 1 and cp.stdout == "" and "CPU 1023" in cp.stderr and "pthread_setaffinity_np" in cp.stderr


def _cpu(cpu, slices, min_ns, p50_ns, max_ns, sum_ns):
    return {"cpu": cpu, "slices": slices, "min_ns": min_ns, "p50_ns": p50_ns, "max_ns": max_ns, "sum_ns": sum_ns}


def _manifest():
    # CPU 0: fastest slice 1000 ns (in the second check); 10 slices a check summing 10000, 12500, 20000 ns
    # lose 0, 20 and 50 %. CPU 1: fastest 2000; 20000 and 25000 ns lose 0 and 20 %, its last check failed.
    return {"cpu_speed": {"tool": "rpc-cpuspeed", "checks": [
        {"when": "start", "cpus": [_cpu(0, 10, 1000, 1000, 1000, 10000), _cpu(1, 10, 2000, 2000, 2000, 20000)]},
        {"when": "udp sweep 1", "cpus": [_cpu(0, 10, 1000, 1000, 4000, 12500), _cpu(1, 10, 2000, 2400, 3000, 25000)]},
        {"when": "udp sweep 2", "cpus": [_cpu(0, 10, 1500, 2000, 3000, 20000)]},
        {"when": "tcp sweep 1", "error": "rpc-cpuspeed: exit 1"}]}}


def test_cpu_losses_against_each_cpus_fastest_slice():
    got = cpu_losses(_manifest())
    assert got["checks"] == 3 and got["errors"] == [("tcp sweep 1", "rpc-cpuspeed: exit 1")]
    c0, c1 = got["cpus"][0], got["cpus"][1]
    assert c0["fastest_slice_ns"] == 1000 and c0["lost_pct"] == [0.0, 20.0, 50.0]
    assert c0["median_lost_pct"] == 20.0 and c0["max_lost_pct"] == 50.0 and c0["worst_check"] == "udp sweep 2"
    assert c0["max_slice_ratio"] == 4.0
    assert c1["lost_pct"] == [0.0, 20.0] and c1["median_lost_pct"] == 10.0 and c1["max_slice_ratio"] == 1.5
    assert worst_loss(got) == (50.0, 15.0)
    text = describe(got)
    assert "CPU 0 lost a median 20.0 %" in text and "at most 50.0 %, udp sweep 2" in text
    assert "1 check(s) failed: tcp sweep 1: rpc-cpuspeed: exit 1" in text


def test_a_capture_without_checks_has_no_losses():
    assert cpu_losses({}) is None and cpu_losses({"cases": []}) is None
    assert describe(None) is None and worst_loss(None) is None
    only_failed = cpu_losses({"cpu_speed": {"checks": [{"when": "start", "error": "not built"}]}})
    assert only_failed["cpus"] == {} and worst_loss(only_failed) is None
    assert describe(only_failed).startswith("no check ran")

def test_a_runs_pace_is_the_mean_of_its_fastest_slices():
    assert run_pace_ns({"pace": {"before": {"slices": 8, "min_ns": 700}, "after": {"slices": 8, "min_ns": 711}}}) == 706
    assert run_pace_ns({"pace": {"before": {"slices": 8, "min_ns": 700}, "after": {"slices": 0, "min_ns": 0}}}) == 700
    assert run_pace_ns({}) is None and run_pace_ns({"pace": None}) is None


def test_pace_response_pools_the_sizes_relative_to_their_medians():
    paces = [600, 660, 720, 690, 630]
    # udp: the p50 moves by the square of the pace (elasticity 2) at two sizes 4x apart; tcp: not at all
    cases = [{"transport": "udp", "repeats": {"untraced_pace_ns": paces,
                                              "untraced_p50_ns": [base * (p / 660) ** 2 for p in paces]}}
             for base in (20000, 80000)]
    cases.append({"transport": "tcp", "repeats": {"untraced_pace_ns": paces, "untraced_p50_ns": [15000] * 5}})
    cases.append({"transport": "tcp", "repeats": {"traced_pace_ns": [None, None], "traced_p50_ns": [1, 2]}})
    got = pace_response({"cases": cases})
    u = got["udp"]["untraced"]
    assert u["runs"] == 10 and u["corr"] == 1.0 and u["elasticity"] == 2.0
    assert u["p50_range_pct"] == pytest.approx(100 * ((u["pace_range_pct"] / 100 + 1) ** 2 - 1), abs=0.2)
    assert got["tcp"]["untraced"]["elasticity"] == 0.0 and got["tcp"]["untraced"]["corr"] is None
    assert "traced" not in got["tcp"]                      # runs without a pace are left out
    assert "udp untraced: correlation 1.0, 2.0 % of the p50 per % of the pace" in describe_pace(got)
    assert pace_response({"cases": [{"transport": "udp", "repeats": {"untraced_p50_ns": [1, 2, 3]}}]}) == {}
    assert describe_pace({}) is None


def test_rpc_client_times_its_cpus_pace_around_its_calls(rpc_server, rpc_client):
    server = rpc_server(transport="udp")
    r = rpc_client(server, calls=200, extra=["--cpu", "0", "--pace-slices", "4"]).assert_ok(200)
    pace = r["pace"]
    assert pace["cpu"] == 0 and pace["slice_iterations"] == 500000
    for when in ("before", "after"):
        assert pace[when]["slices"] == 4 and 0 < pace[when]["min_ns"] <= pace[when]["p50_ns"], pace
    assert "pace" not in rpc_client(server, calls=10).assert_ok(10)      # none unless asked
    bad = rpc_client(server, calls=10, extra=["--pace-slices", "65"])
    assert bad.returncode == 2 and "--pace-slices" in bad.stderr and "out of range" in bad.stderr
