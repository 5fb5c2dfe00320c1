"""`rpcscope run --target`: unmodified libtirpc (UDP and TCP) and gRPC (TCP) programs on the local
testbed, recorded with kernel events only, reduced (a few hundred calls): every call of the program
matched with its reply on the other host, every kernel step of its path present, and each call's path
adding up to its RTT. Bad input fails before anything starts.

Safety: the testbed's addresses are in 198.18.0.0/15 inside namespaces; the module holds the
machine-wide testbed test lock (rpcscope.testbed.held_by_tests).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from helpers import shared_testbed

from rpcscope.analysis.kernelonly import PATH_IDS, Call, Op, analyze_case, match_pair
from rpcscope.analysis.uprobesteps import attach_edges, intervals
from rpcscope.collectors.uprobes import parse_spec
from rpcscope.output import UserError
from rpcscope.tracepoints.targetsteps import edges, on_path, target_steps

REPO = pathlib.Path(__file__).resolve().parents[2]
RPCSCOPE = [sys.executable, "-c", "import sys; from rpcscope.cli import main; sys.exit(main())"]
PEERS = REPO / "build" / "peers" / "bin"
CASE = pathlib.Path(__file__).parent / "fixtures" / "target-case-tcp-0"
CALLS, WARMUP = 300, 20
EDGE_IDS = tuple(s.id for s in edges())
# The device hand-offs: from one host's device to the other's, across the testbed's bridge.
NETWORK_IDS = tuple(s.id for s in on_path() if s.side == "network")


def rpcscope(*args, timeout=300, check=True):
    p = subprocess.run(RPCSCOPE + list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check:
        assert p.returncode == 0, f"rpcscope {' '.join(args)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr}"
    return p


def test_catalog_chains_the_round_trip():
    """K1..K11 chain from the client's send to its receive: each begins with the event the one before
    ends with, and each names the DCE steps it stands for."""
    path = on_path()
    assert [s.id for s in path] == list(PATH_IDS) and len(path) == 11
    for a, b in zip(path, path[1:]):
        assert set(a.kernel_end) & set(b.kernel_begin) or (a.id, b.id) == ("K6", "K7"), (a.id, b.id)
    assert path[0].kernel_begin[0].startswith("syscalls:sys_enter_send")
    assert path[-1].kernel_end[0].startswith("syscalls:sys_exit_recv")
    assert all(s.dce for s in target_steps())
    # the call's edges, which a --uprobe enclosing the call measures, meet the path's two ends
    before, after = edges()
    assert set(before.kernel_end) == set(path[0].kernel_begin) and set(after.kernel_begin) == set(path[-1].kernel_end)


def _call(i, t0, t_end):
    t = [t0 + k * (t_end - t0) // 11 for k in range(12)]
    t[-1] = t_end
    return Call(index=i, socket="s", t=t, steps={}, missing=[], slept={}, request=0, reply=0, overlap={})


def test_the_outermost_enclosing_probe_gives_the_calls_edges():
    """Of two probed functions that enclose the calls, the outer one (the program's call function around its
    library's) gives each call KC1 (entry to first send) and KC2 (last receive to return); a call that no
    probe encloses gets none, and a probe inside a step gives none."""
    calls = [_call(0, 1000, 2000), _call(1, 5000, 6000), _call(2, 9000, 10000)]
    probes = [{"event": "g:inner", "shown": "stub"}, {"event": "g:outer", "shown": "peer_call"},
              {"event": "g:inside", "shown": "dispatch"}]
    ev = []
    for c, wrap in zip(calls[:2], (True, True)):
        a, b = c.t[0], c.t[-1]
        ev += [(a - 300, "g:outer", 7, None), (a - 100, "g:inner", 7, None), (b + 50, "g:inner__return", 7, None),
               (b + 200, "g:outer__return", 7, None), (c.t[5] + 1, "g:inside", 8, None),
               (c.t[5] + 2, "g:inside__return", 8, None)]
    ev.sort()
    assert attach_edges(intervals(ev, probes), probes, calls) == "peer_call"
    assert calls[0].edges == {"KC1": 300, "KC2": 200} and calls[1].edges == {"KC1": 300, "KC2": 200}
    assert not calls[2].edges and calls[2].call_rtt is None
    assert calls[0].call_rtt == 1000 + 500
    assert attach_edges(intervals(ev, probes[2:]), probes[2:], calls[2:]) is None


@pytest.mark.parametrize("spec, want", [
    ("peer_call:call", ("peer_call", "call")),
    ("(anonymous namespace)::peer_call:call", ("(anonymous namespace)::peer_call", "call")),
    ("(anonymous namespace)::peer_call", ("(anonymous namespace)::peer_call", "peer_call")),
    ("rpcspeer::Peer::Stub::Echo", ("rpcspeer::Peer::Stub::Echo", "Echo")),
    ("svc_getreq_common", ("svc_getreq_common", "svc_getreq_common"))])
def test_uprobe_specs_take_demangled_names(spec, want):
    assert parse_spec(spec) == want


@pytest.mark.parametrize("spec", ["", "   "])
def test_bad_uprobe_specs_are_refused(spec):
    with pytest.raises(UserError, match="give SYMBOL"):
        parse_spec(spec)


@pytest.mark.parametrize("sighting", ["connected", "before connect()", "never seen", "server's never seen"])
def test_client_socket_pairs_however_the_poller_saw_it(tmp_path, sighting):
    """The poller may see the client's TCP socket connected, between its socket() and connect() (no peer
    yet), or not at all (the program ran between two polls), and may miss the server's accepted socket
    (accepted and closed between two polls): its calls pair with the server's all the same."""
    case = tmp_path / "case"
    shutil.copytree(CASE, case)
    rec = json.loads((case / "sockets.json").read_text())
    mine = [s for s in rec["sockets"] if s["pid"] == rec["client_pid"]]
    assert len(mine) == 1 and mine[0]["proto"] == "tcp" and not mine[0]["remote"].endswith(":0")
    if sighting == "before connect()":
        mine[0].update(local="0.0.0.0:0", remote="0.0.0.0:0")
    elif sighting == "never seen":
        rec["sockets"].remove(mine[0])
    elif sighting == "server's never seen":
        peer = [s for s in rec["sockets"] if s["local"] == mine[0]["remote"] and s["remote"] == mine[0]["local"]]
        assert len(peer) == 1
        rec["sockets"].remove(peer[0])
    (case / "sockets.json").write_text(json.dumps(rec))
    r = analyze_case(case)
    assert r.matched == r.exchanges == 331 and not r.unmatched
    assert len(r.calls) == r.program_calls == 300 and r.setup == 31 and not r.program_unmatched


def test_first_screen_of_a_case_with_no_matched_call():
    """A case whose program calls all went unmatched (its data socket unseen, say) still gets its first
    screen, saying so, not an error."""
    from rpcscope.analysis.kernelonly_out import first_screen, summarize
    from rpcscope.analysis.kernelonly_probe import CaseCost, costs, point
    res = dataclasses.replace(analyze_case(CASE), case_id="empty", calls=[])
    pt = point(res)
    s = summarize(res, pt, costs([pt])[res.case_id])
    assert s["largest"] == [] and s["calls"] == 0 and s["model_input"] is None
    text = first_screen(s)
    assert "largest steps   none: no call of the program matched" in text
    assert "RTT p50         none: no call matched" in text
    # with a cost per event (the run's other cases'), and nothing to correct
    pt = dataclasses.replace(pt, untraced_p50s_us=[60.0, 62.0], delta_us=14.0)
    assert "no matched call to correct" in first_screen(summarize(res, pt, CaseCost(500.0, "the other cases")))


def test_bad_target_fails_before_anything_starts(tmp_path):
    p = rpcscope("run", "--target", "nosuch", "--out", str(tmp_path / "x"), check=False)
    assert p.returncode == 2 and "invalid choice" in p.stderr and "Traceback" not in p.stderr
    p = rpcscope("run", "--target", "grpc", "--transport", "udp", "--sizes", "0", "--out", str(tmp_path / "y"),
                 check=False)
    assert p.returncode == 2 and "grpc has no UDP" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "y").exists()
    p = rpcscope("run", "--target", "libtirpc", "--uprobe", "no_such_function", "--out", str(tmp_path / "z"),
                 check=False)
    assert p.returncode == 2 and "no function 'no_such_function'" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "z").exists()
    for bad in ("0", "51"):
        p = rpcscope("run", "--target", "libtirpc", "--repeats", bad, "--out", str(tmp_path / "r"), check=False)
        assert p.returncode == 2 and "the rounds of every case, 1 to 50" in p.stderr, p.stderr
        assert not (tmp_path / "r").exists()


def _target_run(out, case_dirs):
    """A target run directory holding recorded cases, as `rpcscope run --target` leaves it after its capture."""
    (out / "cases").mkdir(parents=True)
    cases = []
    for d in case_dirs:
        shutil.copytree(d, out / "cases" / d.name)
        cases.append(json.loads((d / "case.json").read_text()))
    (out / "target.json").write_text(json.dumps({
        "format": "rpcscope-target/1", "target": "reference", "proc": "maxarg", "calls": 300, "warmup": 30,
        "uprobes": [], "left_out": [], "cases": cases}))


def test_analyze_reads_a_target_run_again(tmp_path):
    """`rpcscope analyze` of a target run's directory redoes its kernel-only analysis and writes its outputs."""
    out = tmp_path / "run"
    _target_run(out, [CASE])
    p = rpcscope("analyze", str(out))
    assert "calls matched" in p.stdout and "largest steps" in p.stdout, p.stdout
    doc = json.loads((out / "analysis" / "kernelonly.json").read_text())
    assert [c["calls"] for c in doc["cases"]] == [300]
    p = rpcscope("analyze", str(out), "--json")
    doc = json.loads(p.stdout)
    assert doc["cases"][0]["program_calls"] == 300 and doc["not_analyzed"] == [] and doc["models"] == []


def test_model_of_a_run_with_too_few_sizes_says_why(tmp_path):
    """`rpcscope model` of a target run: refused with the reason where it cannot fit, never a traceback."""
    out = tmp_path / "run"
    _target_run(out, [CASE])
    p = rpcscope("model", str(out), check=False)
    assert p.returncode == 2 and "has no analysis yet" in p.stderr and f"rpcscope analyze {out}" in p.stderr
    rpcscope("analyze", str(out))
    p = rpcscope("model", str(out), check=False)
    assert p.returncode == 2 and "the model fits at 3 sizes or more; tcp has 1 (0)" in p.stderr, p.stderr
    p = rpcscope("model", str(out), "--transport", "udp", check=False)
    assert p.returncode == 2 and "this run has no udp case" in p.stderr and "Traceback" not in p.stderr


def test_a_case_that_cannot_be_analyzed_leaves_the_others_be(tmp_path):
    """Of two cases, one with a damaged sockets.json: the other is analyzed, the damaged one is named with
    what to do, in the output, kernelonly.json and the report."""
    out = tmp_path / "run"
    _target_run(out, [CASE])
    bad = out / "cases" / "tcp-maxarg-0-r2"
    shutil.copytree(CASE, bad)
    (bad / "sockets.json").write_text("{ damaged")
    p = rpcscope("analyze", str(out))
    assert "rpcscope: tcp-maxarg-0-r2 - not analyzed:" in p.stdout and "capture the case again" in p.stdout, p.stdout
    doc = json.loads((out / "analysis" / "kernelonly.json").read_text())
    assert [c["case"] for c in doc["cases"]] == [CASE.name] and doc["not_analyzed"][0]["case"] == bad.name
    rpcscope("report", str(out))
    assert "Captured, not analyzed: tcp-maxarg-0-r2" in (out / "report" / "report.md").read_text()


def test_a_complete_capture_stays_when_its_analysis_fails(tmp_path, monkeypatch, capsys):
    """`run --target` keeps a complete capture whose analysis fails (here: a damaged sockets.json) and says
    how to analyze it again; a capture that fails part way leaves no directory."""
    from rpcscope import target_run, testbed
    from rpcscope.cli import main
    from rpcscope.collectors.target import TargetCase

    def recorded(target, todo, proc, calls, warmup, out, **kw):
        _target_run(out, [CASE])
        (out / "cases" / CASE.name / "sockets.json").write_text("{ damaged")
        return [TargetCase(**json.loads((CASE / "case.json").read_text()))]

    def failing(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(testbed, "load_state", lambda: {"up": True})
    for cap, kept in ((recorded, True), (failing, False)):
        out = tmp_path / cap.__name__
        monkeypatch.setattr(target_run, "capture", cap)
        rc = main(["run", "--target", "reference", "--transport", "tcp", "--sizes", "0", "--out", str(out)])
        err = capsys.readouterr().err
        assert rc != 0 and "Traceback" not in err, err
        assert out.exists() == kept, (cap.__name__, err)
        if kept:
            assert f"kept in {out}" in err and f"rpcscope analyze {out}" in err, err
            assert (out / "target.json").exists() and (out / "cases" / CASE.name / "net").exists()


@pytest.fixture(scope="module")
def testbed():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root")
    if not all(shutil.which(t) for t in ("ip", "sshd", "rpcbind")) or not (PEERS / "grpc-client").exists():
        pytest.skip("needs iproute2, openssh-server, rpcbind (make bootstrap) and the peers (make peers)")
    yield from shared_testbed()


def check_run(out, n_cases):
    doc = json.loads((out / "analysis" / "kernelonly.json").read_text())
    assert doc["format"] == "rpcscope-kernelonly/1" and len(doc["cases"]) == n_cases
    for c in doc["cases"]:
        label = f"{c['target']} {c['case']}"
        assert c["calls"] == c["program_calls"] == CALLS, (label, c["calls"], c["program_calls"])
        assert c["program_calls_matched_%"] == 100.0 and not c["program_unmatched"], (label, c["program_unmatched"])
        # beyond the program's calls: a binding's lookup (rpcbind), HTTP/2's connection set-up frames
        assert c["matched_%"] >= 98.0, (label, c["unmatched"])
        assert c["calls_with_missing_events"] == 0 and c["calls_whose_path_does_not_sum"] == 0, label
        steps = {s["id"]: s for s in c["steps"]}
        assert all(steps[k]["missing_calls"] == 0 for k in PATH_IDS), label
        assert len(c["largest"]) == 3 and all(k in PATH_IDS + EDGE_IDS for k in c["largest"]), label
        assert 0 < c["rtt_p50_us"] and 0 < c["program_p50_us"], label
        # the kernel sees less than the program times (not its marshalling, nor its clock reads)
        assert c["rtt_p50_us"] <= c["program_p50_us"] * 1.05, (label, c["rtt_p50_us"], c["program_p50_us"])
        # the untraced runs on either side of the traced one, and every step's recorded events
        pr = c["probe"]
        assert len(pr["untraced_program_p50s_us"]) == 2 and min(pr["untraced_program_p50s_us"]) > 0, (label, pr)
        assert pr["events_per_call"] >= len(PATH_IDS) + 1, (label, pr)
        assert all(steps[k]["events_p50"] >= 1 for k in PATH_IDS if steps[k]["p50_us"] > 0), label
        # a hand-off holds its own transmit and the bridge's two hops (its side of each host's veth pair),
        # recorded because they run the net instance's probe too
        assert all(steps[k]["events_p50"] >= 3 for k in NETWORK_IDS), (label, [steps[k] for k in NETWORK_IDS])
    rows = list(csv.DictReader(open(out / "analysis" / "kernelonly-calls.csv")))
    assert len(rows) == CALLS * n_cases
    for r in rows:
        parts = [int(r[k]) for k in PATH_IDS]
        assert min(parts) >= 0 and sum(parts) == int(r["rtt_ns"]) > 0, r
        assert not r["missing"], r


@pytest.mark.testbed
def test_libtirpc_udp_and_tcp(testbed, tmp_path):
    out = tmp_path / "tirpc"
    p = rpcscope("run", "--target", "libtirpc", "--transport", "udp,tcp", "--proc", "echo", "--sizes", "0",
                 "--calls", str(CALLS), "--warmup", str(WARMUP), "--uprobe", "peer_echo_1:call",
                 "--uprobe", "rpcspeer_prog_1:dispatch", "--uprobe", "peer_call:program", "--out", str(out))
    assert "calls matched" in p.stdout and "largest steps" in p.stdout, p.stdout
    check_run(out, 2)
    # the rpcgen stub encloses each call, and the program's call function encloses the stub: the outer one
    # gives the calls their edges; the server's dispatch runs within its compute step (K6)
    for c in json.loads((out / "analysis" / "kernelonly.json").read_text())["cases"]:
        up = {u["step"]: u for u in c["uprobes"]}
        assert up["call"]["where"] == "encloses the call" and up["call"]["calls_with_it"] == CALLS, up["call"]
        assert up["call"]["call_rtt_p50_us"] >= c["rtt_p50_us"], (up["call"], c["rtt_p50_us"])
        assert up["dispatch"]["where"] == "inside K6" and up["dispatch"]["calls_with_it"] == CALLS, up["dispatch"]
        check_edges(out, c, "peer_call")


@pytest.mark.testbed
def test_grpc_tcp(testbed, tmp_path):
    out = tmp_path / "grpc"
    rpcscope("run", "--target", "grpc", "--transport", "tcp", "--proc", "echo", "--sizes", "0",
             "--calls", str(CALLS), "--warmup", str(WARMUP), "--uprobe", "(anonymous namespace)::peer_call:call",
             "--out", str(out))
    check_run(out, 1)
    check_edges(out, json.loads((out / "analysis" / "kernelonly.json").read_text())["cases"][0],
                "(anonymous namespace)::peer_call")


def check_edges(out, c, symbol):
    """The probed call function gives (nearly) every call its edges KC1, KC2; each such call's path, from the
    function's entry to its return, adds up to its call RTT, which holds the kernel's RTT."""
    assert c["call_probe"] == symbol and c["calls_with_edges"] >= 0.99 * CALLS, c
    steps = {x["id"]: x for x in c["steps"]}
    assert steps["KC1"]["rtp"] and steps["KC2"]["rtp"] and steps["KC1"]["p50_us"] > 0, steps["KC1"]
    assert c["call_rtt_p50_us"] > c["rtt_p50_us"], c
    n = 0
    for r in csv.DictReader(open(out / "analysis" / "kernelonly-calls.csv")):
        if r["case"] == c["case"] and r["KC1"]:
            n += 1
            parts = [int(r["KC1"]), *(int(r[k]) for k in PATH_IDS), int(r["KC2"])]
            assert min(parts) >= 0 and sum(parts) == int(r["call_rtt_ns"]) > int(r["rtt_ns"]), r
    assert n == c["calls_with_edges"], (n, c["calls_with_edges"])


@pytest.mark.testbed
def test_a_target_model_predicts_a_size_it_did_not_fit(testbed, tmp_path):
    """run --target --repeats 2 captures every case twice, each round every size in turn, and fits the unit
    costs at every size on its median round; `rpcscope model` fitted at three sizes predicts the fourth
    from the arithmetic alone, with the baselines beside it."""
    out = tmp_path / "model"
    p = rpcscope("run", "--target", "libtirpc", "--transport", "udp", "--proc", "echo", "--sizes", "0,1392,4016,6000",
                 "--calls", str(CALLS), "--warmup", str(WARMUP), "--repeats", "2", "--out", str(out))
    assert "model: libtirpc UDP echo" in p.stdout, p.stdout[-2000:]
    assert "add --uprobe 'peer_call:call'" in p.stdout, p.stdout[-1000:]
    doc = json.loads(rpcscope("analyze", str(out), "--json").stdout)
    assert [m["transport"] for m in doc["models"]] == ["udp"] and len(doc["cases"]) == 8
    cases = sorted(d.name for d in (out / "cases").iterdir())
    assert cases == sorted(f"udp-echo-{z}-r{r}" for z in (0, 1392, 4016, 6000) for r in (1, 2)), cases
    doc = json.loads((out / "analysis" / "targetmodel-udp.json").read_text())
    assert doc["fitted"] == [0, 1392, 4016, 6000] and len(doc["params"]) <= 10 and doc["path"] == "K1..K11"
    assert all(r["cv_error_pct"] is not None and r["spread_pct"] is not None and r["case"] in cases
               for r in doc["rows"]), doc["rows"]
    m = json.loads(rpcscope("model", str(out), "--fit", "0,1392,6000", "--predict", "8000", "--json").stdout)
    rows = {r["size"]: r for r in m["models"][0]["rows"]}
    assert rows[4016]["kind"] == "predicted" and None not in (rows[4016]["error_pct"], rows[4016]["interp_error_pct"],
                                                               rows[4016]["line_error_pct"]), rows[4016]
    assert rows[8000]["kind"] == "calculated" and rows[8000]["model_us"] > rows[6000]["model_us"] > 0
    assert rows[4016]["request_bytes"] == 40 + 4 + 4016


class _Straight:
    """A timeline whose every direction runs straight from the send to the receive's return."""

    def half(self, start, end, end_tid, sender, receiver, missing, side):
        step = (end - start) / 5
        return [start + round(k * step) for k in range(5)] + [end], True

    def charged(self, t, tids):
        return {}


def _ops(seq):
    """Ops of (time, side, kind, bytes): client tid 1, server tid 2, each 2 ns long."""
    return [Op(tid=1 if side == "C" else 2, tgid=1 if side == "C" else 2, fd=3, kind=kind, enter=t, exit=t + 2,
               n=n) for t, side, kind, n in seq]


@pytest.mark.parametrize("answer", ["after the next request", "before the next request"])
def test_a_ping_behind_a_reply_stretches_no_call(answer):
    """The server sends a PING behind reply 1; the client reads the reply, then (in its next call) the PING,
    and answers it after or before its next request. Each call ends at its own reply and the next begins
    at its own request: no two calls overlap, and reply 1 is its 49 bytes."""
    seq = [(0, "C", "send", 58), (10, "S", "recv", 58), (20, "S", "send", 49), (25, "S", "send", 17),
           (30, "C", "recv", 49)]
    if answer == "after the next request":
        seq += [(40, "C", "send", 58), (45, "C", "recv", 17), (50, "C", "send", 17), (60, "S", "recv", 58),
                (62, "S", "recv", 17), (70, "S", "send", 49), (80, "C", "recv", 49)]
    else:
        seq += [(40, "C", "send", 58), (45, "S", "recv", 58), (48, "C", "recv", 17), (50, "C", "send", 17),
                (55, "S", "send", 49), (60, "C", "recv", 49), (65, "S", "recv", 17)]
    seq += [(90, "C", "send", 58), (100, "S", "recv", 58), (110, "S", "send", 49), (120, "C", "recv", 49)]
    ops = _ops(seq)
    calls, n = match_pair([o for o in ops if o.tid == 1], [o for o in ops if o.tid == 2], False, _Straight(),
                          "s", {})
    assert n == 3 and len(calls) == 3 and not any(c.control for c in calls)
    assert [c.reply for c in calls] == [49, 49, 49] and calls[0].t[-1] == 32
    assert calls[1].t[0] == 40 and calls[2].t[0] == 90
    assert all(b.t[0] >= a.t[-1] for a, b in zip(calls, calls[1:])), [(c.t[0], c.t[-1]) for c in calls]
