"""`rpcscope crosscheck` (the reference RPC's kernel-only step costs beside its tracepoint-based ones) and
`rpcscope report` of a `run --target` run.

The counterparts come from the catalog; bad input fails with one line; on the testbed, a reduced real
pair of runs (the untraced build under `run --target reference`, the traced build under `capture`,
`analyze`, `rtp`) gives a table with a row for every transport, size and target step, each with its
figures and a verdict, and the boundaries that differ named. The 10 % goal itself is a measured figure,
not asserted here. The report of a target run is checked on a small recorded fixture (its target.json
and kernelonly.json) and on the reduced run.

Safety: the testbed's addresses are in 198.18.0.0/15 inside namespaces; the testbed module holds the
machine-wide testbed test lock (rpcscope.testbed.held_by_tests).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
from helpers import rpcscope, shared_testbed

from rpcscope.analysis import crossprices, crossstretch
from rpcscope.analysis.crosscheck import AGREES, DIFFERS, NONE, OTHER, _modes, counterparts
from rpcscope.tracepoints import SEGMENT_UNITS
from rpcscope.tracepoints.targetsteps import kernel_steps

HERE = pathlib.Path(__file__).resolve().parent
RECORDED = HERE / "fixtures" / "crosscheck-small"           # ko/ (run --target reference), traced/
FIXTURE = RECORDED / "ko"
CALLS, WARMUP = 300, 30
PATH = {k.id for k in kernel_steps() if k.rtp}
NETWORK = {k.id for k in kernel_steps() if set(k.dce) & set(SEGMENT_UNITS.values())}


def test_counterparts_come_from_the_catalog():
    """Every target step has its catalog counterpart: its dce steps, or the path's network segments;
    a step and its counterpart bound the same interval exactly where the catalog's events say so."""
    cps = {c.step: c for c in counterparts()}
    assert list(cps) == [s.id for s in kernel_steps()]
    for s in kernel_steps():
        c = cps[s.id]
        if c.segments:
            assert all(SEGMENT_UNITS[x] in s.dce for x in c.segments)
        else:
            assert c.rows == s.dce
        assert c.same == (not c.why)
    # the wake-ups and the reply's send to its hand-off are bounded by the same kernel events on both sides
    assert cps["K4"].same and cps["K10"].same and cps["K7"].same
    # the client's send step: C7 begins at a user mark before the send, where K1 begins at its entry
    assert not cps["K1"].same and "c7_begin" in cps["K1"].why
    assert not cps["K11"].same and "c18_end" in cps["K11"].why


def test_bad_input_fails_with_one_line(tmp_path):
    p = rpcscope("crosscheck", str(tmp_path / "none"), str(tmp_path / "none2"), check=False)
    assert p.returncode == 2 and "target.json is not there" in p.stderr and "Traceback" not in p.stderr, p.stderr
    other = tmp_path / "tirpc"
    other.mkdir()
    (other / "target.json").write_text(json.dumps({"format": "rpcscope-target/1", "target": "libtirpc"}))
    p = rpcscope("crosscheck", str(other), str(tmp_path), check=False)
    assert p.returncode == 2 and "needs one of the reference RPC" in p.stderr and "Traceback" not in p.stderr
    p = rpcscope("crosscheck", str(FIXTURE), str(tmp_path), check=False)
    assert p.returncode == 2 and "not a traced run" in p.stderr and "Traceback" not in p.stderr, p.stderr
    part = tmp_path / "part"
    (part / "analysis").mkdir(parents=True)
    shutil.copy(FIXTURE / "target.json", part / "target.json")
    shutil.copy(FIXTURE / "analysis" / "kernelonly.json", part / "analysis" / "kernelonly.json")
    p = rpcscope("crosscheck", str(part), str(RECORDED / "traced"), check=False)
    assert p.returncode == 2 and "kernelonly-calls.csv is not there" in p.stderr, p.stderr
    # one run: a capture that holds kernel-only runs; a traced run without them, or a target run, is refused
    for run in (RECORDED / "traced", FIXTURE, tmp_path / "none"):
        p = rpcscope("crosscheck", str(run), check=False)
        assert p.returncode == 2 and "holds no kernel-only runs" in p.stderr and "Traceback" not in p.stderr, \
            p.stderr
    p = rpcscope("capture", "--kernel-only-runs", "--out", str(tmp_path / "c"), check=False)
    assert p.returncode == 2 and "add --turns" in p.stderr and not (tmp_path / "c").exists(), p.stderr
    for flag in ("--kernel-only-traced-runs", "--kernel-only-doubled-runs"):
        p = rpcscope("capture", "--turns", flag, "--out", str(tmp_path / "c"), check=False)
        assert p.returncode == 2 and "add --turns --kernel-only-runs" in p.stderr and not (tmp_path / "c").exists(), \
            p.stderr


def test_a_case_the_kernel_only_analysis_left_out_is_named_with_its_reason(tmp_path):
    """A case the kernel-only analysis could not analyze (kernelonly.json not_analyzed) is not compared, and
    the table says why."""
    ko = tmp_path / "ko"
    shutil.copytree(FIXTURE, ko)
    doc = json.loads((ko / "analysis" / "kernelonly.json").read_text())
    doc["cases"] = [c for c in doc["cases"] if c["case"] != "udp-maxarg-0"]
    doc["not_analyzed"] = [{"case": "udp-maxarg-0", "why": "its decoded events are damaged; capture it again"}]
    (ko / "analysis" / "kernelonly.json").write_text(json.dumps(doc))
    out = json.loads(rpcscope("crosscheck", str(ko), str(RECORDED / "traced"), "--json").stdout)
    assert ("udp", 0) not in {(c["transport"], c["size"]) for c in out["cases"]}
    assert out["unpaired"] == ["udp maxarg 0: not in the kernel-only run (udp-maxarg-0 not analyzed: its decoded "
                               "events are damaged; capture it again)"], out["unpaired"]


def check_target_report(run, out):
    p = rpcscope("report", str(run), "--out", str(out))
    assert "calls matched" in p.stdout and "kernel-only" in p.stdout, p.stdout
    doc = json.loads((run / "analysis" / "kernelonly.json").read_text())
    md = (out / "report.md").read_text()
    tables = json.loads((out / "tables.json").read_text())
    assert tables["format"] == "rpcscope-report-tables/1"
    first = [t for t in tables["tables"] if "calls matched, RTT" in t["title"]]
    assert len(first) == len({c["transport"] for c in doc["cases"]}), [t["title"] for t in tables["tables"]]
    rows = [r for t in first for r in t["rows"]]
    assert len(rows) == len(doc["cases"])
    for c in doc["cases"]:
        r = next(r for t in first if c["transport"].upper() in t["title"] for r in t["rows"]
                 if r["size"] == c["size"])
        assert r["RTT p50 µs kernel-only"] == c["rtt_p50_us"] and r["program p50 µs"] == c["program_p50_us"]
        assert r["calls matched"].startswith(f"{c['calls']} of {c['program_calls']}")
        assert all(k in r["largest steps (mean µs, share of RTT)"] for k in c["largest"])
        assert r["unmatched (why)"] == ("; ".join(f"{n} {w}" for w, n in c["program_unmatched"].items()) or "none")
    # every table of the page has its twin in tables.json, in the same order
    assert [t["title"] for t in tables["tables"]] == [ln[4:] for ln in md.splitlines() if ln.startswith("### ")]
    assert md.index("calls matched, RTT") < md.index("Steps, ")
    assert (out / "index.html").read_text().count("<table") == len(tables["tables"])
    p = rpcscope("report", str(run), "--out", str(out), "--json")
    head = json.loads(p.stdout)["summary"]
    assert len(head["first_screen"]) == len(doc["cases"])


def test_target_report_on_a_recorded_run(tmp_path):
    check_target_report(FIXTURE, tmp_path / "report")


def test_target_report_bad_input(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE / "target.json", run / "target.json")
    p = rpcscope("report", str(run), check=False)
    assert p.returncode == 2 and "kernelonly.json is not there" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (run / "report").exists()


@pytest.fixture(scope="module")
def testbed():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root")
    if not all(shutil.which(t) for t in ("ip", "sshd")):
        pytest.skip("needs iproute2 and openssh-server (make bootstrap)")
    yield from shared_testbed()


@pytest.mark.testbed
def test_crosscheck_on_a_reduced_pair(testbed, tmp_path):
    """A kernel-only run beside a capture whose runs took turns with kernel-only runs of their own: the
    two-run table, and the one-capture table (crosscheck RUN), each case's kernel-only run from the round
    the traced analysis kept."""
    ko, tr = tmp_path / "ko", tmp_path / "traced"
    sizes, transports = "0", "udp,tcp"
    rpcscope("run", "--target", "reference", "--transport", transports, "--sizes", sizes, "--calls", str(CALLS),
             "--warmup", str(WARMUP), "--out", str(ko), timeout=600)
    rpcscope("capture", "--out", str(tr), "--transport", transports, "--sizes", sizes, "--calls", str(CALLS),
             "--warmup", str(WARMUP), "--repeats", "2", "--turns", "--kernel-only-runs", "--kernel-only-traced-runs",
             "--kernel-only-doubled-runs", "--calibration", "quick",
             timeout=900)
    p = rpcscope("analyze", str(tr), timeout=600)
    inside, traced_build, doubled = tr / "kernelonly", tr / "kernelonly-traced", tr / "kernelonly-doubled"
    for d in (inside, traced_build, doubled):
        assert f"kernel-only runs: 4 case(s) analysed in {d}" in p.stdout, p.stdout
    rpcscope("rtp", str(tr), timeout=600)
    check_table(ko, tr, CALLS)
    assert json.loads((inside / "target.json").read_text())["rounds"] == 2
    for d in (inside, traced_build, doubled):
        assert sorted(p.name for p in (d / "cases").iterdir()) == \
            [f"{t}-maxarg-0-r{r}" for t in ("tcp", "udp") for r in (1, 2)]
    # the traced build's runs leave no user trace behind: only their kernel events are analysed
    assert not list(traced_build.glob("cases/*/ust-*"))
    for d in (inside, traced_build, doubled):
        shutil.rmtree(d / "analysis")
    check_table(inside, tr, CALLS, one=True)            # analyzes kernelonly/ on first use
    doc = json.loads(rpcscope("crosscheck", str(tr), "--json").stdout)
    kept = json.loads((tr / "manifest.json").read_text())["sweeps"]
    for c in doc["cases"]:
        r = kept[c["transport"]]["kept_by_case"][c["traced_case"]] + 1
        assert c["kernel_only_case"] == f"{c['traced_case']}-r{r}" and c["runs"]["kernel_only"] == 1, c
        # beside each step, its kernel-only median in every round; the kept round's is the step's own
        assert c["rounds"] == 2, c
        for row in c["rows"]:
            assert len(row["kernel_only_rounds_p50_us"]) == 2 and \
                row["kernel_only_rounds_p50_us"][r - 1] == row["kernel_only_p50_us"], row
        # what the traced build's user tracepoints add to each step: its kernel-only run less the untraced
        # build's, in the kept round (and in each round)
        assert c["traced_build_case"] == c["kernel_only_case"], c
        path = [row for row in c["rows"] if row["step"] in PATH]
        for row in path:
            assert row["user_stretch_us"] == pytest.approx(
                row["kernel_only_traced_build_p50_us"] - row["kernel_only_p50_us"], abs=0.002), row
            assert len(row["user_stretch_rounds_us"]) == 2 and row["user_stretch_rounds_us"][r - 1] == \
                pytest.approx(row["user_stretch_us"], abs=0.002), row
        assert c["user_stretch_path_us"] == pytest.approx(sum(row["user_stretch_us"] for row in path), abs=0.01)
        for row in c["rows"]:
            if "traced_correction_measured_us" in row:     # both correct it: what each correction should take off
                assert row["traced_correction_measured_us"] == pytest.approx(
                    row["kernel_only_p50_us"] - row["kernel_only_corrected_p50_us"] + row["user_stretch_us"],
                    abs=0.005), row
                assert row["traced_correction_us"] == pytest.approx(
                    row["traced_p50_us"] - row["traced_corrected_p50_us"], abs=0.005), row
        if c["prices"]:     # the traced probe effect less its kernel events at the kernel-only price
            pr = c["prices"]
            assert pr["user_event_left_ns"] == pytest.approx((1e3 * pr["traced_probe_effect_us"] - pr[
                "path_kernel_events"] * pr["kernel_only_event_ns"]) / pr["path_user_events"], rel=0.01, abs=5), pr
        assert c["user_stretch_program_us"] == pytest.approx(
            c["traced_build_program_p50_us"] - c["kernel_only_program_p50_us"], abs=0.002), c
        # where one more recording of the kernel events lands: the doubled run less the kernel-only run, step by
        # step, and per event the kernel-only analysis charges the step
        assert c["doubled_case"] == c["kernel_only_case"], c
        evs = 0.0
        for row in path:
            assert row["kernel_stretch_us"] == pytest.approx(
                row["kernel_only_doubled_p50_us"] - row["kernel_only_p50_us"], abs=0.002), row
            assert len(row["kernel_stretch_rounds_us"]) == 2, row
            if row["events_per_call"]:
                assert row["kernel_stretch_per_event_ns"] == pytest.approx(
                    1e3 * row["kernel_stretch_us"] / row["events_per_call"], abs=0.1), row
            evs += row["events_per_call"] or 0.0
        assert c["kernel_stretch_path_us"] == pytest.approx(sum(row["kernel_stretch_us"] for row in path), abs=0.01)
        assert c["kernel_stretch_events_per_call"] == pytest.approx(evs, abs=0.01) and evs > 0, c
        assert c["kernel_stretch_per_event_ns"] == pytest.approx(1e3 * c["kernel_stretch_path_us"] / evs, abs=0.1), c
    out = rpcscope("crosscheck", str(tr)).stdout
    assert "the kernel-only medians over the capture's 2 rounds" in out and "user +: the traced build's" in out, out
    assert "kernel +: the kernel-only run" in out and "events a call the kernel-only analysis charges" in out, out
    # where the doubled recording lands over both cases' intervals and rounds: in place and spread, fitted
    fit = doc["placement"]["kernel"]
    assert fit["points"] == 2 * 2 * len(PATH - NETWORK) and fit["network_points"] == 2 * 2 * len(PATH & NETWORK), fit
    assert "where kernel + (per kernel event" in out and "where user + (per user mark" in out, out
    two = json.loads(rpcscope("crosscheck", str(ko), str(tr), "--json").stdout)
    assert all(c["rounds"] is None and "kernel_only_rounds_p50_us" not in c["rows"][0]
               and "user_stretch_path_us" not in c and "kernel_stretch_path_us" not in c for c in two["cases"])
    # the capture's report has the same table
    p = rpcscope("report", str(tr), "--out", str(tmp_path / "tr-report"), "--json")
    head = json.loads(p.stdout)["summary"]
    assert head["crosscheck"]["bound_by_both"] == doc["bound_by_both"] and head["crosscheck"]["agree"] == doc["agree"]
    md = (tmp_path / "tr-report" / "report.md").read_text()
    table = md.split("### Cross-check: kernel-only and tracepoint-based step medians", 1)[1].split("\n### ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and ("UDP 0 B" in ln or "TCP 0 B" in ln)]
    assert len(rows) == 2 * len(kernel_steps()), rows
    assert ("### Cross-check: the probe prices behind the corrections" in md) == any(c["prices"] for c in doc["cases"])
    table = md.split("### Cross-check: where a kernel event's recording lands", 1)[1].split("\n### ", 1)[0]
    lands = [ln for ln in table.splitlines() if ln.startswith("| ") and ("UDP 0 B" in ln or "TCP 0 B" in ln)]
    assert len(lands) == 2, md
    check_target_report(ko, tmp_path / "report")
    # the kernel-only run measured its probe (untraced runs beside the traced one) and corrects its steps
    doc = json.loads(rpcscope("crosscheck", str(ko), str(tr), "--json").stdout)
    for c in doc["cases"]:
        k4 = next(r for r in c["rows"] if r["step"] == "K4")
        assert k4["kernel_only_corrected_p50_us"] is not None, (c["transport"], k4)


def test_a_step_whose_calls_gather_in_two_places_names_both_modes():
    """Wake-ups that take 4 us in some calls and 20 us in others: two modes, their shares, and the median
    between them, which a table of medians alone would hide."""
    fast, slow = [4000 + (i % 7) * 40 for i in range(900)], [20000 + (i % 9) * 60 for i in range(1100)]
    got = _modes(fast + slow, 20000)
    assert [round(m["share"], 2) for m in got["modes"]] == [0.45, 0.55], got
    assert got["modes"][0]["from_us"] <= 4.0 < got["modes"][0]["to_us"] and \
        got["modes"][1]["from_us"] <= 20.2 < got["modes"][1]["to_us"], got
    assert got["p50_mode"] == 1
    one = _modes(fast, 4100)
    assert len(one["modes"]) == 1 and one["p50_mode"] == 0, one
    assert _modes([], None) is None


def test_the_prices_set_the_traced_solve_beside_the_kernel_only_price(tmp_path):
    """A traced run whose solve charges 448 ns every event, 22 us of probe effect over 33 user and 19 kernel
    events on the path, beside kernel-only runs pricing a kernel event at 577 and 579 ns: 578 ns, and
    (22000 - 19 x 578) / 33 ns left a user event. A case the solve did not take as a point, or kernel-only
    runs without a price, give none."""
    (tmp_path / "tr" / "analysis").mkdir(parents=True)
    (tmp_path / "tr" / "analysis" / "probe.json").write_text(json.dumps({
        "cases": {"tcp-maxarg-0": {"ust_event_ns": 448.0, "kernel_event_ns": {"net": 448.0, "other": 448.0},
                                   "method": "one cost per event"}},
        "transports": {"tcp": {"points": {"tcp-maxarg-0": {
            "d_total_ns": 22000.0, "path_events_per_call": {"ust": 33.0, "kernel_net": 5.0, "kernel_other": 14.0}}}}}}))
    probes = crossprices.traced_probes([tmp_path / "tr", tmp_path / "none"])
    ko = [{"probe": {"ns_per_event": 577.0}}, {"probe": {"ns_per_event": 579.0}}]
    p = crossprices.case_prices(probes, "tcp-maxarg-0", "tcp", ko)
    assert (p["traced_user_event_ns"], p["traced_kernel_event_ns"], p["kernel_only_event_ns"]) == (448.0, 448.0, 578.0)
    assert (p["path_user_events"], p["path_kernel_events"], p["traced_probe_effect_us"]) == (33.0, 19.0, 22.0)
    assert p["user_event_left_ns"] == pytest.approx((22000 - 19 * 578) / 33, abs=0.05)
    assert f"leaves {(22000 - 19 * 578) / 33:.0f} ns a user event" in crossprices.render(p)
    assert crossprices.case_prices(probes, "tcp-maxarg-1392", "tcp", ko) is None
    assert crossprices.case_prices(probes, "tcp-maxarg-0", "tcp", [{"probe": {"calibrates": False}}]) is None


def test_crosscheck_on_recorded_runs():
    check_table(RECORDED / "ko", RECORDED / "traced", json.loads((FIXTURE / "target.json").read_text())["calls"])


def test_runs_of_each_side_are_pooled(tmp_path):
    """Several runs a side, separated by commas (made taking turns with the other side's): each side's
    calls pooled. The recorded pair given twice a side: twice the calls, the same medians and verdicts."""
    ko, tr = RECORDED / "ko", RECORDED / "traced"
    one = json.loads(rpcscope("crosscheck", str(ko), str(tr), "--json").stdout)
    two = json.loads(rpcscope("crosscheck", f"{ko},{ko}", f"{tr},{tr}", "--json").stdout)
    assert two["kernel_only_runs"] == [str(ko)] * 2 and two["traced_runs"] == [str(tr)] * 2
    assert (two["agree"], two["bound_by_both"]) == (one["agree"], one["bound_by_both"])
    for a, b in zip(one["cases"], two["cases"]):
        assert b["runs"] == {"kernel_only": 2, "traced": 2}
        for x, y in zip(a["rows"], b["rows"]):
            assert (y["kernel_only_p50_us"], y["traced_p50_us"], y["verdict"]) == \
                (x["kernel_only_p50_us"], x["traced_p50_us"], x["verdict"]), (a["transport"], a["size"], x["step"])
            assert y["kernel_only_calls"] == 2 * x["kernel_only_calls"] and y["traced_calls"] == 2 * x["traced_calls"]
    p = rpcscope("crosscheck", f"{ko},{tmp_path / 'none'}", str(tr), check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr and str(tmp_path / "none") in p.stderr, p.stderr


def check_table(ko, tr, calls, one=False):
    """The table of a pair of runs of the same cases (one: of one capture, tr, whose kernel-only run is
    ko): complete and well-formed."""
    argv = [str(tr)] if one else [str(ko), str(tr)]
    p = rpcscope("crosscheck", *argv, "--json")
    doc = json.loads(p.stdout)
    steps = [s.id for s in kernel_steps()]
    want = {(c["transport"], c["size"]) for c in json.loads((ko / "analysis" / "kernelonly.json").read_text())["cases"]}
    assert not doc["unpaired"] and {(c["transport"], c["size"]) for c in doc["cases"]} == want
    for c in doc["cases"]:
        assert [r["step"] for r in c["rows"]] == steps, c["rows"]
        for r in c["rows"]:
            label = (c["transport"], c["size"], r["step"])
            assert r["verdict"] in (AGREES, DIFFERS, OTHER, NONE), label
            assert r["kernel_only_calls"] == calls and r["kernel_only_p50_us"] is not None, label
            if r["verdict"] in (AGREES, DIFFERS, OTHER):
                assert r["traced_p50_us"] is not None, label
                if r["traced_p50_us"] >= 0.1:
                    want = r["kernel_only_p50_us"] / r["traced_p50_us"] * 100 - 100
                    assert abs(r["diff_%"] - want) < 1.0, (label, r)
            both = r["kernel_only_corrected_p50_us"] is not None and r["traced_corrected_p50_us"] is not None
            if r["verdict"] in (AGREES, DIFFERS):
                # where each side's calls gather, beside the medians
                for side in ("kernel_only_modes", "traced_modes"):
                    m = r[side]
                    assert m is not None and sum(x["share"] for x in m["modes"]) <= 1.0001, (label, side, m)
                # at the shared price where the capture measured it, else on the corrected figures where both
                # sides correct the step, else on the raw ones
                placed = r["placed_diff_%"] is not None
                assert placed == ("in_place_ns" in doc["shared_price"] and r["events_per_call"] is not None), label
                assert r["verdict_on"] == ("placed" if placed else "corrected" if both else "raw"), label
                d = r["placed_diff_%"] if placed else r["corrected_diff_%"] if both else r["diff_%"]
                assert (r["verdict"] == AGREES) == (d is not None and abs(d) <= doc["tolerance_%"]), label
            else:
                assert r["why"], label        # named, not dropped
            if r["verdict"] != NONE and not r["traced"].startswith("rtp.json"):
                assert r["traced_calls"] + r["traced_left_out"] == calls and r["traced_calls"] > 0, label
        verdicts = {r["step"]: r["verdict"] for r in c["rows"]}
        if c["exchanges_per_call"] > 1.05:       # UDP windows: the kernel-only path is one exchange of several
            assert set(verdicts.values()) <= {OTHER, NONE}, verdicts
        else:
            assert verdicts["K4"] in (AGREES, DIFFERS) and verdicts["K1"] == OTHER, verdicts
    text = rpcscope("crosscheck", *argv).stdout
    assert text.count("UDP maxarg 0 B") == 1 and text.count("TCP maxarg 0 B") == 1, text
    assert "other interval: K1 begins at" in text, text


def test_the_placement_fit_recovers_a_known_in_place_cost_and_spread():
    """Stretches made as 300 ns a charged event plus 2 % of the interval's time, over two rounds, give
    back 300 ns and 0.02 (r2 1); the network intervals are set apart (1100 ns a charged one), and a case
    of two exchanges a call, whose path counts one exchange's events, is left out. Without points: None."""
    def case(per_call, net_ns=1100.0):
        rows = []
        for i, k in enumerate(kernel_steps()):
            n, t = (1.0 + i % 4, 2.0 + 0.7 * i)
            s = (net_ns * n / 1e3) if k.id in NETWORK else 0.3 * n + 0.02 * t
            rows.append({"step": k.id, "events_per_call": n, "kernel_only_p50_us": t,
                         "kernel_stretch_rounds_us": [s, s + (0.5 if per_call > 1 else 0.0)]})
        return {"exchanges_per_call": per_call, "kernel_stretch_path_us": 1.0, "rows": rows}

    p = crossstretch.placement([case(1.0), case(2.0, net_ns=5000.0)], "kernel")
    on_path = len(PATH - NETWORK)
    assert p["points"] == 2 * on_path and p["network_points"] == 2 * len(NETWORK & PATH), p
    assert p["in_place_ns_per_charged"] == pytest.approx(300.0, abs=0.5), p
    assert p["spread_per_us_of_time"] == pytest.approx(0.02, abs=1e-4) and p["r2"] == pytest.approx(1.0), p
    assert p["network_ns_per_charged"] == pytest.approx(1100.0, abs=0.5), p
    assert p["held_at_zero"] == []
    assert crossstretch.placement([case(2.0)], "kernel") is None
    # Stretches that shrink with the interval's time: the free fit's spread is below zero, so it is held at
    # zero and the cost in place fitted alone; a stretch that shrinks with both holds both at zero.
    for r in (c := case(1.0))["rows"]:
        n, t = r["events_per_call"], r["kernel_only_p50_us"]
        r["kernel_stretch_rounds_us"] = [0.3 * n - 0.01 * t] * 2
    held = crossstretch.placement([c], "kernel")
    assert held["held_at_zero"] == ["spread"] and held["spread_per_us_of_time"] == 0.0, held
    x = [(r["events_per_call"], r["kernel_only_p50_us"]) for r in c["rows"] if r["step"] in PATH - NETWORK]
    alone = sum(n * (0.3 * n - 0.01 * t) for n, t in x) / sum(n * n for n, _ in x)
    assert held["in_place_ns_per_charged"] == pytest.approx(1e3 * alone, abs=0.1), held
    assert "spread held at zero: the free fit put it below" in crossstretch.render_placement({"kernel": held})[0]
    for r in c["rows"]:
        r["kernel_stretch_rounds_us"] = [-0.3 * r["events_per_call"] - 0.01 * r["kernel_only_p50_us"]] * 2
    none = crossstretch.placement([c], "kernel")
    assert none["held_at_zero"] == ["in place", "spread"] and none["in_place_ns_per_charged"] == 0.0, none
    assert "in_place_ns" not in crossstretch.shared_price(none)
    assert crossstretch.placement([case(1.0)], "user") is None      # no user stretch in these cases
    assert "300 ns in place a charged one, 2.0 % of the interval's time spread" in \
        crossstretch.render_placement({"kernel": p})[0]



def test_both_sides_take_their_charged_kernel_events_off_at_one_shared_price():
    """The shared price is the doubled runs' placement fit (300 ns in place, 2 % of the time): each side of a
    row less its own charged kernel events at it and 2 % of its own time; a fit with a term below zero, or no
    fit, sets no price, and a row then gets no shared figures (its verdict falls back to the corrections)."""
    fit = {"in_place_ns_per_charged": 300.0, "spread_per_us_of_time": 0.02, "r2": 0.9, "held_at_zero": []}
    price = crossstretch.shared_price(fit)
    assert price == {"in_place_ns": 300.0, "spread": 0.02, "r2": 0.9}
    assert crossstretch.shared_price(dict(fit, spread_per_us_of_time=0.0))["spread"] == 0.0
    row = {"kernel_only_p50_us": 5.0, "traced_p50_us": 4.0, "events_per_call": 2.0,
           "traced_kernel_events_per_call": 1.0, "marks": 0}
    crossstretch.place(row, price)
    assert row["kernel_only_placed_p50_us"] == pytest.approx(5.0 - 0.6 - 0.1)
    assert row["traced_placed_p50_us"] == pytest.approx(4.0 - 0.3 - 0.08)
    assert row["placed_diff_%"] == pytest.approx(100 * (4.3 - 3.62) / 3.62, abs=0.05)
    for bad in (None, dict(fit, in_place_ns_per_charged=0.0)):
        none = crossstretch.shared_price(bad)
        assert "in_place_ns" not in none and none["why"], bad
        crossstretch.place(row, none)
        assert row["placed_diff_%"] is None and row["traced_placed_p50_us"] is None
        assert "the verdict is on each side's own correction" in crossstretch.render_price(none)
    marked = dict(row, marks=3)                  # a step with user marks: not at the kernel price alone
    crossstretch.place(marked, price)
    assert marked["placed_diff_%"] is None
