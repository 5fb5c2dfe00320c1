"""The round-trip-path walk (analysis/rtp.py) on the committed real run (fixtures/run-udp-small): the path
sums to the round trip, its steps, the typical call, the events' cost spread over the path, the
command line, and a model unit for every segment. Hand-built kernels are test_rtp.py's."""
import argparse
import json
import pathlib
import shutil

import numpy as np
import pytest

from rpcscope.analysis import rtp, rtp_cli
from rpcscope.analysis.model_input import observations
from rpcscope.output import UserError

RUN = pathlib.Path(__file__).parent / "fixtures" / "run-udp-small"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    d = tmp_path_factory.mktemp("rtp") / "run"
    shutil.copytree(RUN, d, ignore=shutil.ignore_patterns("analysis"))
    return rtp.analyze_rtp(d, per_rpc=True), d


def test_real_run_sums_to_rtt(real):
    out, d = real
    assert (d / "analysis" / "rtp.json").exists()
    for c in out["cases"]:
        assert c["walked"] == c["rpcs"] > 0
        for p in c["per_rpc"]:
            assert abs(p["sum_ns"] - p["rtt_ns"]) <= 1000


def test_real_run_steps_on_the_path(real):
    out, _ = real
    for c in out["cases"]:
        for p in c["per_rpc"]:
            on = {s[0] for s in p["segments"]}
            for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C18", "C19", "C20", "C21"):
                assert s in on, (c["case"], s)
            if c["size"] == 0:        # a one-packet call: the server's receive .. send is on the path
                for s in ("S4", "S5", "S6", "S7", "S8", "S9'"):
                    assert s in on, (c["case"], s)
            for name, (off, sl) in p["slack"].items():
                assert sl >= 0 and off > 0
        # Overlapped as in DCE's Figure 5 (here every RPC): the client's C9-C14, the server's S10-S14.
        over = {r["step"] for r in c["overlapped"]}
        assert {"C9", "C10", "C11", "C14", "S10", "S11", "S14"} <= over
        path = {r["segment"]: r for r in c["path"]}
        assert path["C16"]["on_path_frac"] == 1.0 and path["S2"]["on_path_frac"] == 1.0

def test_path_counts_occurrences_not_pieces():
    """The client's send of one fragment (C8'') holds the server's receive softirq (S1) on veth, and
    the path passes through it in two pieces: one occurrence. A second fragment's send is a second; a
    segment no occurrence holds (C16, from the waking to the switch in) counts once a piece."""
    occs = {"C8''": [(0, 30, 1), (50, 60, 1)], "S1": [(10, 20, 2)]}
    segs = [("C8''", 0, 10, 1, 0), ("S1", 10, 20, 2, 0), ("C8''", 20, 30, 1, 0), ("C8''", 50, 60, 1, 0),
            ("C16", 70, 80, 1, 1), ("C16", 90, 95, 1, 1)]
    assert rtp.path_occurrences(occs, segs) == {"C8''": 2, "S1": 1, "C16": 2}


def test_call_edges_only_when_every_call_of_the_traced_run_was_walked():
    """The client's clock spans the call beyond C1 .. C21; its p50 minus the walked p50 is that time,
    if the two are of the same calls. Three calls of 1000, 1100, 1200 ns walked, 1150 ns by the clock."""
    def res(calls):
        per = [{"call_id": i, "rtt_ns": r, "sum_ns": r, "probe_ns": 100.0, "path_events": (1, 0, 0), "ok": True,
                "segments": [("C1", 0, r, 100.0)], "slack": {}} for i, r in enumerate((1000, 1100, 1200))]
        return {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 3, "walked": 3,
                "problems": {}, "per_rpc": per, "untraced_p50_ns": 1000, "traced": {"p50": 1150, "calls": calls}}
    agg = rtp.aggregate(res(3))
    assert agg["call_edges_ns"] == 50.0 and agg["rtt_median_ns"] == 1100.0
    assert agg["rtt_corrected_median_ns"] == 1050.0                  # 1100 - 100 of probes + 50
    assert agg["path"][0]["segment"] == rtp.CALL_EDGES and agg["path"][0]["typical_corrected_ns"] == 50.0
    assert sum(r["typical_ns"] for r in agg["path"]) == agg["typical"]["rtt_mean_ns"]
    agg = rtp.aggregate(res(2000))                                   # a sample of a longer run: no edges
    assert agg["call_edges_ns"] is None and agg["rtt_corrected_median_ns"] == 1000.0
    assert rtp.CALL_EDGES not in {r["segment"] for r in agg["path"]}


def test_the_typical_call_of_a_bimodal_run_lies_in_the_median_calls_mode():
    """A capture's traced UDP null call: 55 % of its calls on the short path (server
    wake-up S2 2.8 us), 45 % on one with interrupt-borne wake-ups (S2 15.8 us, 13 us longer). The
    40th-60th percentile band took both modes; the fifth of the RPCs nearest the median takes the
    median call's, and its mean RTT sits at the median."""
    per = []
    for i in range(1000):
        long = i % 20 >= 11                                   # 9 of every 20: 45 %
        s2 = 15800 if long else 2800 + (i % 7) * 10
        per.append({"call_id": i, "rtt_ns": 10000 + s2, "sum_ns": 10000 + s2, "probe_ns": 0.0,
                    "path_events": (1, 0, 0), "ok": True, "slack": {},
                    "segments": [("C1", 0, 10000, 0.0), ("S2", 10000, s2, 0.0)]})
    res = {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 1000, "walked": 1000,
           "problems": {}, "per_rpc": per, "untraced_p50_ns": 12800, "traced": {"p50": 12830, "calls": 5000}}
    agg = rtp.aggregate(res)
    s2 = next(r for r in agg["path"] if r["segment"] == "S2")
    assert agg["typical"]["rpcs"] == 200 and s2["typical_ns"] < 2900
    assert abs(agg["typical"]["rtt_mean_ns"] - agg["rtt_median_ns"]) < 50
    # the old band: the 40th-60th percentiles straddle the modes
    corr = np.array([p["rtt_ns"] for p in per], float)
    lo, hi = np.percentile(corr, (40, 60))
    assert np.mean([p["segments"][1][2] for p, c in zip(per, corr) if lo <= c <= hi]) > 4000


def _split_rpc(jitter=0):
    """One RPC's path as analyze_case records it, (label, offset, duration, in-place charge, user events,
    kernel events), at 200 ns a user event and 150 ns a kernel one: two steps of one user tracepoint and
    no code (90 and 95 ns traced), a step with code and one user tracepoint (C5: 400 ns), a step of one
    kernel event (S3: 120 ns), a kernel step with two kernel events and a user one (C8': 2000 ns), a
    wake-up with no event (S2: 3000 ns)."""
    return [("C1", 0, 90 + jitter, 200.0, 1, 0), ("C2", 90, 95, 200.0, 1, 0), ("C5", 185, 400, 200.0, 1, 0),
            ("S3", 585, 120, 150.0, 0, 1), ("C8'", 705, 2000, 500.0, 1, 2), ("S2", 2705, 3000, 0.0, 0, 0)]


def test_an_events_cost_beyond_its_own_step_is_spread_over_the_path():
    """The emptiest one-tracepoint step of each class sets the direct cost of its events (user: 90 ns,
    C1's mean; kernel: 120 ns, S3's); the rest of each event's cost (110 ns x 4 user events, 30 ns x 3
    kernel events) is taken off the segments in proportion to the time they keep after their direct
    charges. No step comes out below zero, the total charge is the in-place one, and every segment's
    kept time shrinks by the same factor."""
    per = [{"segments": _split_rpc(jitter=(i % 3) - 1)} for i in range(9)]   # C1: 89, 90, 91 ns
    split = rtp.probe_split(per)
    assert split == {"user": {"event_ns": 200.0, "direct_ns": 90.0, "direct_from": "C1"},
                     "kernel": {"event_ns": 150.0, "direct_ns": 120.0, "direct_from": "S3"}}
    segs = _split_rpc()
    taken = rtp.split_charges(segs, split)
    assert sum(taken) == pytest.approx(sum(s[3] for s in segs))               # 1250 ns either way
    kept = [s[2] - t for s, t in zip(segs, taken)]
    assert min(kept) >= 0 and kept[0] == pytest.approx(0.0) and kept[3] == pytest.approx(0.0)
    # left after direct charges: C2 5, C5 310, C8' 1670 (2000 - 90 - 2 x 120), S2 3000 ns; the spread,
    # 4 x 110 + 3 x 30 = 530 ns, takes 530 / 4985 of each
    factor = 1 - 530 / 4985
    assert [kept[i] for i in (1, 2, 4, 5)] == pytest.approx([5 * factor, 310 * factor, 1670 * factor, 3000 * factor])
    # the in-place rule had C2 at 95 - 200 = -105 ns, S3 at -30 and S2 at all of its 3000
    assert [s[2] - s[3] for s in segs][:4] == [-110, -105, 200, -30]


def test_no_split_without_event_counts_a_one_event_step_or_one_cost():
    """Segments recorded without their event counts (older per-RPC data, hand-built paths): no split.
    A class with no catalog step holding one of its events alone in half the RPCs, or whose events
    cost differently (a loopback calibration's cost per kernel event name), is charged in place."""
    old = [{"segments": [("C1", 0, 90, 200.0)]}]
    assert rtp.probe_split(old) is None
    assert rtp.split_charges(old[0]["segments"], None) == [200.0]
    busy = [{"segments": [("C5", 0, 400, 400.0, 2, 0), ("S2", 400, 3000, 0.0, 0, 0)]}]
    assert rtp.probe_split(busy) == {"user": None, "kernel": None}
    assert rtp.split_charges(busy[0]["segments"], rtp.probe_split(busy)) == [400.0, 0.0]
    seldom = [{"segments": _split_rpc()} if i < 4 else
              {"segments": [("C5", 0, 400, 200.0, 1, 0), ("S3", 400, 130, 160.0, 0, 1)]} for i in range(10)]
    split = rtp.probe_split(seldom)
    assert split["user"]["direct_from"] == "C5"     # C1 and C2 alone in 4 of 10 RPCs: under the share
    assert split["user"]["direct_ns"] == 200.0      # C5 takes more than an event's whole cost: no split
    assert split["kernel"] is None                  # S3's one event cost 150 ns in some RPCs, 160 in others


def test_the_typical_path_with_the_split():
    """aggregate: each segment's typical corrected time by the split, the in-place charge's median kept
    beside it (probe_median_ns) and what was taken off (typical_probe_ns); the corrected path sums to
    the traced one less every event's calibrated cost, as before."""
    per = [{"call_id": i, "rtt_ns": 5705, "sum_ns": 5705, "probe_ns": 1250.0, "path_events": (4, 3, 0),
            "ok": True, "slack": {}, "segments": _split_rpc()} for i in range(5)]
    res = {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 5, "walked": 5,
           "problems": {}, "per_rpc": per, "untraced_p50_ns": 4500, "traced": {"p50": 5705, "calls": 5000}}
    agg = rtp.aggregate(res)
    rows = {r["segment"]: r for r in agg["path"]}
    assert agg["probe_split"]["user"]["direct_ns"] == 90.0 and agg["probe_split"]["kernel"]["direct_ns"] == 120.0
    assert rows["C1"]["typical_corrected_ns"] == pytest.approx(0.0)
    assert rows["C1"]["probe_median_ns"] == 200.0 and rows["C1"]["typical_probe_ns"] == pytest.approx(90.0)
    assert sum(r["typical_corrected_ns"] for r in agg["path"]) == pytest.approx(5705 - 1250)


def _cli(argv, capsys):
    ap = argparse.ArgumentParser(prog="rpcscope")
    rtp_cli.register(ap.add_subparsers())
    try:
        args = ap.parse_args(argv)
        rc = args.func(args)
    except UserError as e:
        rc, err = 1, str(e)
    except SystemExit as e:
        rc, err = e.code, ""
    else:
        err = ""
    out = capsys.readouterr()
    return rc, out.out, out.err + err


def test_cli(real, tmp_path, capsys):
    _, d = real
    rc, out, _ = _cli(["rtp", "--help"], capsys)
    assert rc == 0 and "examples:" in out
    rc, out, err = _cli(["rtp", str(d), "--quiet"], capsys)
    assert rc == 0, err
    assert "udp-maxarg-0" in out and "slack" in out and "veth" in out
    rc, out, _ = _cli(["rtp", str(d), "--json", "--case", "udp-maxarg-0"], capsys)
    j = json.loads(out)
    assert j["format"] == "rpcscope-rtp/1" and [c["case"] for c in j["cases"]] == ["udp-maxarg-0"]
    rc, out, err = _cli(["rtp", str(d), "--case", "udp-maxarg-0", "--rpc", "0"], capsys)
    assert rc == 0 and "C21" in out
    rc, out, err = _cli(["rtp", str(tmp_path)], capsys)
    assert rc != 0 and "manifest" in err


def test_registered_in_the_cli():
    src = (pathlib.Path(__file__).parents[2] / "rpcscope" / "cli.py").read_text()
    assert '"rpcscope.analysis.rtp_cli"' in src


def test_every_path_segment_has_a_model_unit(real):
    """The model charges each segment of the measured path to a unit through the catalog: none is left
    unknown, and the class times with the network add up to the path."""
    _, d = real
    obs = observations(d, "udp")
    assert "unclassified_segments" not in obs.inputs
    for z, o in obs.sizes.items():
        assert o.path_us and sum(o.class_us.values()) + o.network_us == pytest.approx(o.path_us)
        assert o.class_us["send"] > 0 and o.class_us["wakeup"] > 0 and o.class_us["call"] > 0
