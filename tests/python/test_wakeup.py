"""The wake-up calibration (rpc-wakecal, rpc/wakecal.h) run for real on loopback, its unit costs
(analysis/wakeup.py) on hand-made points with known answers, and the untraced runs' extra sleeps and
interrupts (analysis/run.py other_path_counts)."""
import json
import subprocess

import pytest

from rpcscope.analysis.run import other_path_counts
from rpcscope.analysis.wakeup import after_interrupt_us, run_wake_costs, wake_costs
from rpcscope.collectors.idle import IdlePolicy


def _pt(offset, mean_us, sleeps, ipis, busy=False):
    return {"offset_ns": offset, "busy": busy, "mean_ns": mean_us * 1000, "sleeps": sleeps, "ipis": ipis}


def test_wake_costs_line_through_the_points_that_slept():
    # busy 3 us; sleeping readers 6 us + 12 us per interrupt; points that did not sleep are left out
    pts = [_pt(0, 3.0, 0, 0, busy=True), _pt(-4000, 4.4, 0.0, 0.0), _pt(-2500, 6.0 + 12 * 0.9, 1.0, 0.9),
           _pt(-2000, 6.0 + 12 * 1.0, 1.0, 1.0), _pt(-1200, 6.0 + 12 * 0.3, 1.0, 0.3), _pt(0, 6.0, 1.0, 0.0),
           _pt(500, 6.0, 1.0, 0.0)]
    c = wake_costs(pts)
    assert c["busy_us"] == 3.0 and c["wake_us"] == pytest.approx(6.0) and c["ipi_us"] == pytest.approx(12.0)
    assert c["sleep_us"] == pytest.approx(3.0) and c["slept_points"] == 5 and c["raced_points"] == 3
    assert c["fit_rms_us"] == pytest.approx(0.0, abs=1e-6)


def test_wake_costs_without_a_race_have_no_interrupt_cost():
    calm = [_pt(0, 3.0, 0, 0, busy=True), _pt(0, 6.0, 1.0, 0.0), _pt(100, 6.2, 1.0, 0.01), _pt(200, 6.1, 1.0, 0.0)]
    c = wake_costs(calm)
    assert c["ipi_us"] is None and c["wake_us"] == pytest.approx(6.1) and c["sleep_us"] == pytest.approx(3.1)
    # every wake-up by interrupt (a CPU left to halt): the sleep's cost holds it, no separate slope
    halted = [_pt(0, 3.0, 0, 0, busy=True), _pt(0, 22.0, 1.0, 1.0), _pt(100, 22.4, 1.0, 1.0)]
    c = wake_costs(halted)
    assert c["ipi_us"] is None and c["sleep_us"] == pytest.approx(19.2)
    assert wake_costs([_pt(0, 6.0, 1.0, 0.0)]) is None                      # no busy row
    assert wake_costs([_pt(0, 3.0, 0, 0, busy=True), _pt(-3000, 3.5, 0.0, 0.0)]) is None   # none slept
    assert run_wake_costs({"wake_calibration": {"server": {"error": "rpc-wakecal: not built"}}}) == {}
    assert run_wake_costs({}) == {}


def test_rpc_wakecal_for_real(rpc_bin):
    """The real calibration on loopback, a few points: a reader that spins 20 us first finds its
    datagram come and never sleeps; one that waits 20 us before the send always does; the busy row never."""
    cp = subprocess.run([str(rpc_bin("rpc-wakecal", False)), "--sender-cpu", "0", "--receiver-cpu", "1",
                         "--iterations", "200", "--offsets", "-20000:20000:40000", "--json"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert (d["sender_cpu"], d["receiver_cpu"], d["iterations"]) == (0, 1, 200)
    busy, early, late = d["points"]
    assert busy["busy"] and busy["sleeps"] < 0.1, busy
    assert (early["offset_ns"], late["offset_ns"]) == (-20000, 20000)
    assert early["sleeps"] < 0.1 and late["sleeps"] > 0.9, d["points"]
    for p in d["points"]:
        assert 0 < p["p10_ns"] <= p["p50_ns"] <= p["p90_ns"] and p["mean_ns"] > 0 and p["ipis"] >= 0, p
    costs = wake_costs(d["points"])
    assert costs is not None and costs["sleep_us"] > 0, costs
    # no offset of these raced the sleeper: the wake-up after an interrupt is not measured
    assert d["after_interrupt"] is None


def test_rpc_wakecal_after_an_interrupt_for_real(rpc_bin):
    """The wake-up after an interrupt, for real: offsets through the race window (where this VM's wake-ups
    take an interrupt), then pairs of the most raced offset and the latest calm one. Whether a race
    iteration takes its interrupt is the VM's timing, so the run's own bookkeeping is what is checked: every
    after iteration is behind a raced or a calm race iteration, the sweep's point is the calm offset's.
    Under the capture's idle policy (polling idle held, collectors/idle.py), as in a capture."""
    with IdlePolicy("poll"):
        cp = subprocess.run([str(rpc_bin("rpc-wakecal", False)), "--sender-cpu", "0", "--receiver-cpu", "1",
                             "--iterations", "400", "--offsets", "-3000:1000:250", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    after = d["after_interrupt"]
    raced = [p for p in d["points"] if not p["busy"] and p["sleeps"] >= 0.95 and p["ipis"] >= 0.3]
    calm = [p for p in d["points"] if not p["busy"] and p["sleeps"] >= 0.95 and 0 <= p["ipis"] < 0.1]
    if not raced or not calm:
        assert after is None, after
        pytest.skip("no offset raced the sleeper on this run (the VM's timing)")
    # the most raced offset first; others, the most raced next, while one races under half its pairs
    by_ipis = [p["offset_ns"] for p in sorted(raced, key=lambda p: -p["ipis"])]
    assert 1 <= after["tries"] <= min(4, len(raced)) and after["race_offset_ns"] in by_ipis[:after["tries"]]
    if after["tries"] == 1:
        assert after["race_offset_ns"] == by_ipis[0]
    assert after["offset_ns"] == calm[-1]["offset_ns"] and after["plain_p50_ns"] == calm[-1]["p50_ns"]
    assert after["pairs"] == 200 and 0 <= after["raced"] <= 200
    # iterations 2, 4, ... 398 are after ones: 199, each behind iteration 1, 3, ... 397
    assert after["after_raced"] + after["after_calm"] == 199
    assert after["after_raced"] <= after["raced"]
    if after["after_raced"]:
        assert after["after_raced_p50_ns"] > 0
    cost, _why = after_interrupt_us(after)
    # None with too few wake-ups behind an interrupt, or where they came out no slower than the sweep's
    # point (a real run on this VM can: a clean-clone `make test` had 123 of them, none costing more);
    # else exactly their p50 less that point
    no_cost = after["after_raced"] < 50 or after["after_raced_p50_ns"] <= after["plain_p50_ns"]
    assert (cost is None) == no_cost, (after, _why)
    if cost is not None:
        assert cost == pytest.approx((after["after_raced_p50_ns"] - after["plain_p50_ns"]) / 1000.0)


def test_after_interrupt_cost_against_the_sweeps_point():
    after = {"offset_ns": 1000, "after_raced": 700, "after_raced_p50_ns": 5710, "after_calm": 260,
             "after_calm_p50_ns": 4880, "plain_p50_ns": 4860}
    cost, why = after_interrupt_us(after)
    assert cost == pytest.approx(0.85) and "sweep's point at 1000 ns" in why and "took none: +0.02 us" in why
    # a captured server CPU's figures: the pairs behind race iterations that did not race are no
    # calm control (8.45 us against the sweep's 4.67); the cost is set against the sweep's point
    real = {"offset_ns": 1000, "after_raced": 371, "after_raced_p50_ns": 5498, "after_calm": 128,
            "after_calm_p50_ns": 8452, "plain_p50_ns": 4666}
    assert after_interrupt_us(real)[0] == pytest.approx(0.832)
    cost, why = after_interrupt_us(dict(after, after_raced=20))
    assert cost is None and "fewer than" in why
    cost, why = after_interrupt_us(dict(after, after_raced_p50_ns=4800))
    assert cost is None and "no cost" in why
    assert after_interrupt_us(None)[0] is None and after_interrupt_us({"after_raced": 70})[0] is None
    pts = [_pt(0, 3.0, 0, 0, busy=True), _pt(0, 6.0, 1.0, 0.0)]
    assert wake_costs(pts, after)["after_ipi_us"] == pytest.approx(0.85)
    assert wake_costs(pts)["after_ipi_us"] is None
    got = run_wake_costs({"wake_calibration": {"client": {"points": pts, "after_interrupt": after}}})
    assert got["client"]["after_ipi_us"] == pytest.approx(0.85)
    # a failed after run keeps the sweep's costs and says why it has none
    got = run_wake_costs({"wake_calibration": {"client": {"points": pts, "after_interrupt": None,
                                                          "after_interrupt_error": "offset -1750 ns: timed out"}}})
    assert got["client"]["sleep_us"] == pytest.approx(3.0) and got["client"]["after_ipi_us"] is None
    assert "timed out" in got["client"]["after_ipi_source"]


@pytest.mark.parametrize("args,expect", [
    (["--sender-cpu", "1", "--receiver-cpu", "1"], "two different CPUs"),
    (["--offsets", "-4000:1000"], "FIRST:LAST:STEP"),
    (["--offsets", "1000:-4000:125"], "the last >= the first"),
    (["--offsets", "-100000:100000:1"], "at most"),
    (["--iterations", "5"], "out of range"),
    (["--max-seconds", "0"], "out of range"),
    (["stray"], "stray"),
])
def test_rpc_wakecal_bad_options(rpc_bin, args, expect):
    cp = subprocess.run([str(rpc_bin("rpc-wakecal", False)), *args], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 2 and cp.stdout == "" and expect in cp.stderr, (cp.returncode, cp.stderr)


def _case(untraced_rounds, traced, agreeing=(0, 1, 2), kept=0):
    return {"sleeps_per_call": {"untraced": untraced_rounds[kept], "traced": traced},
            "repeats": {"agreeing_rounds": list(agreeing), "untraced_sleeps_per_call": untraced_rounds}}


def test_other_path_counts_from_the_level_rounds():
    traced = {"client": 2.0, "server": 2.03, "client_ipi": 0.01, "server_ipi": 0.02}
    rounds = [{"client": 2.0, "server": 3.0, "client_ipi": 0.0, "server_ipi": 0.9},
              {"client": 2.0, "server": 2.98, "client_ipi": 0.0, "server_ipi": 1.1},
              {"client": 2.0, "server": 2.0, "client_ipi": 0.0, "server_ipi": 0.0},   # another level's round
              {"client": 2.0, "server": 3.0, "client_ipi": 0.0, "server_ipi": 0.7}]
    got = other_path_counts(_case(rounds, traced, agreeing=(0, 1, 3)))
    # medians over rounds 0, 1, 3: server 3.0 sleeps, 0.9 interrupts; client within the thresholds: 0
    assert got == {"client_sleeps": 0.0, "server_sleeps": pytest.approx(0.97), "client_ipis": 0.0,
                   "server_ipis": pytest.approx(0.88)}
    # fewer than three rounds in the level: the kept round's
    got = other_path_counts(_case(rounds, traced, agreeing=(2, 0), kept=2))
    assert got == {"client_sleeps": 0.0, "server_sleeps": 0.0, "client_ipis": 0.0, "server_ipis": 0.0}
    assert other_path_counts({}) is None
