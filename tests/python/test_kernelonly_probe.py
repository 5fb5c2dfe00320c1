"""The kernel-only capture's probe calibration (analysis/kernelonly_probe.py) and the charge of each
recorded event to one step (analysis/kernelonly.py), on synthetic points and on the recorded case
tests/python/fixtures/target-case-tcp-0 (how it was made: tests/python/fixtures/README.md)."""
import dataclasses
import json
import pathlib
import shutil

import pytest

from rpcscope.analysis.kernelonly import PATH_IDS, Timeline, analyze_case
from rpcscope.analysis.kernelonly_out import first_screen, summarize
from rpcscope.analysis.kernelonly_probe import CasePoint, corrected, costs, point
from rpcscope.rundir import TARGET_EVENT_CPU

CASE = pathlib.Path(__file__).parent / "fixtures" / "target-case-tcp-0"


def pt(case_id, n, c_ns, why=""):
    """A case of n events a call whose probe effect is n x c_ns exactly."""
    return CasePoint(case_id=case_id, traced_p50_us=50.0 + n * c_ns / 1e3, untraced_p50s_us=[50.0, 50.0],
                     events_per_call=float(n), delta_us=n * c_ns / 1e3, why_not=why)


def test_each_case_is_corrected_with_the_other_cases_cost():
    pts = [pt("a", 10, 500), pt("b", 20, 500), pt("c", 30, 800)]
    got = costs(pts)
    # a: from b and c alone, least squares through the origin: (20*10 + 30*24) / (20^2 + 30^2) us an event
    assert got["a"].ns_per_event == pytest.approx((20 * 10 + 30 * 24) / (400 + 900) * 1e3)
    assert got["c"].ns_per_event == pytest.approx(500.0) and "the run's other cases (a, b)" in got["c"].source


def test_a_case_that_does_not_calibrate_sets_no_cost_but_gets_one():
    pts = [pt("one", 10, 400), pt("windows", 40, 9000, why="2.00 exchanges a call")]
    got = costs(pts)
    assert got["windows"].ns_per_event == pytest.approx(400.0)           # the calibrating case's cost
    assert got["one"].ns_per_event == pytest.approx(400.0) and "its own" in got["one"].source
    none = costs([pt("x", 10, 400, why="no untraced runs in this capture")])
    assert none["x"].ns_per_event is None and "no case of the run calibrates" in none["x"].source


def test_drift_larger_than_the_probe_gives_no_negative_cost():
    got = costs([pt("a", 10, -300), pt("b", 10, -300)])
    assert got["a"].ns_per_event == 0.0 and "below zero" in got["a"].source


def test_every_recorded_event_on_the_path_is_charged_to_one_step():
    """Each step holds at least its own first event (the one whose timestamp begins it); the charges sum,
    call by call, to the events inside the call; a correction takes each step's events at the cost."""
    res = analyze_case(CASE)
    assert len(res.calls) == 300
    for c in res.calls:
        assert set(c.events) == set(PATH_IDS)
        assert all(c.events[k] >= 1 for k in PATH_IDS if c.steps[k] > 0), c.events
        fixed = corrected(c, 100.0)
        assert all(fixed[k] == c.steps[k] - 100.0 * c.events[k] for k in PATH_IDS)
    assert point(res).events_per_call >= len(PATH_IDS) + 1          # the steps' and the end's


def test_a_capture_without_untraced_runs_says_so():
    res = analyze_case(CASE)
    p = point(res)
    assert p.why_not == "no untraced runs in this capture" and p.delta_us is None
    s = summarize(res, p, costs([p])[res.case_id])
    assert s["probe"]["ns_per_event"] is None and all(x["corrected_p50_us"] is None for x in s["steps"])
    assert "not measured: this capture has no untraced runs" in first_screen(s)


def test_untraced_runs_give_the_correction(tmp_path):
    """With the untraced runs' p50s in the case record, the case calibrates on its own; its corrected
    steps and RTT are the raw ones less their events at that cost."""
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    rec = json.loads((case / "case.json").read_text())
    rec["untraced_p50s_us"] = [rec["program_p50_us"] - 5.0, rec["program_p50_us"] - 3.0]
    (case / "case.json").write_text(json.dumps(rec))
    res = analyze_case(case)
    p = point(res)
    assert not p.why_not and p.delta_us == pytest.approx(4.0)
    cost = costs([p])[res.case_id]
    assert cost.ns_per_event == pytest.approx(4000.0 / p.events_per_call)
    s = summarize(res, p, cost)
    k4 = next(x for x in s["steps"] if x["id"] == "K4")
    assert k4["corrected_p50_us"] < k4["p50_us"] and k4["events_p50"] >= 1
    assert s["probe"]["corrected_rtt_p50_us"] < s["rtt_p50_us"]
    assert "probe effect    the program's p50" in first_screen(s)
    assert dataclasses.asdict(p)["untraced_p50s_us"] == rec["untraced_p50s_us"]


def test_a_step_is_charged_the_net_events_of_the_cpu_it_ends_on():
    """A wake-up (K4) begins at the server's waking on the waker's CPU and ends at its switch in on the
    server's: it is charged the waking and the net events recorded on the server's CPU in between, not
    those the rest of the softirq records beside it on the waker's. Events decoded without their CPU
    (an older dump) charge every CPU's net events."""
    client, server = 10, 20
    k4 = PATH_IDS.index("K4")
    t = [100 * i for i in range(len(PATH_IDS) + 1)]
    lo, hi = t[k4], t[k4 + 1]
    tids = [server] * len(PATH_IDS)

    def ev(ts, event, tid, cpu, **f):
        return (ts, event, tid, {**f, TARGET_EVENT_CPU: cpu} if cpu is not None else f)

    def k4_events(with_cpu):
        c = (lambda x: x) if with_cpu else (lambda x: None)
        prog = [ev(lo, "sched:sched_waking", client, c(0), pid=server),
                ev(hi, "sched:sched_switch", 0, c(1), next_pid=server, prev_pid=0)]
        net = [ev(lo + 20, "net:netif_receive_skb", client, c(0), name="eth-s", skbaddr=1),
               ev(lo + 40, "net:net_dev_xmit", client, c(0), name="eth-c", skbaddr=2),
               ev(lo + 60, "net:netif_receive_skb", 0, c(1), name="eth-s", skbaddr=3)]
        return Timeline(prog, net, {"client": "eth-c", "server": "eth-s"}).charged(t, tids)[PATH_IDS[k4]]

    assert k4_events(True) == 2           # the waking, and the receive on the server's CPU
    assert k4_events(False) == 4          # the waking, and every net event in the interval
