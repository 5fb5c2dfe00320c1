"""`rpcscope export`: calls of a case as a Perfetto trace, read back through the same TrackEvent protos
and held to analysis/steps.json (the committed two-transport fixture run, analysed in a tmp copy)."""
import collections
import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from rpcscope.cli import main

FIX = Path(__file__).parent / "fixtures" / "run-two-transports"


def _run_cli(argv):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("export") / "run"
    shutil.copytree(FIX, d)
    assert _run_cli(["analyze", str(d), "--quiet"])[0] == 0
    assert _run_cli(["rtp", str(d), "--quiet"])[0] == 0
    return d


def _arg(a):
    for f in ("uint_value", "int_value", "string_value", "bool_value"):
        if a.HasField(f):
            return getattr(a, f)
    return None


@pytest.fixture(scope="module")
def steps(run):
    return json.loads((run / "analysis" / "steps.json").read_text())


def read_back(path):
    """The trace's tracks ({uuid: descriptor}), slices ([(track, begin, end, name, args)]), instants
    ([(track, ts, name, args, flow_out, flow_in)]); fails where a track's slices do not nest."""
    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    tracks, slices, instants, open_ = {}, [], [], collections.defaultdict(list)
    last = {}
    for p in trace.packet:
        assert p.trusted_packet_sequence_id == 1
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
            continue
        e = p.track_event
        assert e.track_uuid in tracks, "an event before its track's descriptor"
        assert p.timestamp >= last.get(e.track_uuid, 0), "a track's events out of time order"
        last[e.track_uuid] = p.timestamp
        args = {a.name: _arg(a) for a in e.debug_annotations}
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[e.track_uuid].append((p.timestamp, e.name, args))
        elif e.type == TrackEvent.TYPE_SLICE_END:
            assert open_[e.track_uuid], "a slice end without its begin"
            b, name, a = open_[e.track_uuid].pop()
            slices.append((e.track_uuid, b, p.timestamp, name, a))
        else:
            assert e.type == TrackEvent.TYPE_INSTANT
            instants.append((e.track_uuid, p.timestamp, e.name, args, list(e.flow_ids), list(e.terminating_flow_ids)))
    assert not any(open_.values()), "slices left open"
    return tracks, slices, instants


def _example(run, case):
    rtp = json.loads((run / "analysis" / "rtp.json").read_text())
    return next(c for c in rtp["cases"] if c["case"] == case)["example_rpc"]


@pytest.mark.parametrize("case", ["udp-maxarg-4016", "tcp-maxarg-4016"])
def test_an_exported_call_reads_back_with_every_step_of_its_call(run, steps, tmp_path, case):
    """The call rtp.json draws, exported by its call id: the client's and the server's threads as
    tracks, a slice for every step steps.json measured in the case, all of that call, nested on their
    tracks; kernel events as instants on both threads; packet and wake-up flows, each from one event
    to one other."""
    ex = _example(run, case)
    out = tmp_path / "call.perfetto-trace"
    rc, text = _run_cli(["export", str(run), "--case", case, "--call-id", str(ex["call_id"]), "--out", str(out),
                         "--json"])
    assert rc == 0, text
    summary = json.loads(text)
    assert summary["call_ids"] == [ex["call_id"]] and summary["missing"] == {}
    tracks, slices, instants = read_back(out)
    threads = {u: t.thread for u, t in tracks.items() if t.HasField("thread")}
    names = {t.thread_name.split()[0] for t in threads.values()}
    assert names == {"client", "server"}
    manifest = json.loads((run / "manifest.json").read_text())
    pids = next(c for c in manifest["cases"] if c["id"] == case)["pids"]
    assert {t.pid for t in threads.values()} == {pids["client"], pids["server"]}
    measured = {r["step"] for r in steps["steps"] if r["case"] == case and r["status"] == "measured"}
    assert {a["step"] for *_, a in slices} == measured
    assert {a["call_id"] for *_, a in slices} == {ex["call_id"]}
    for _, b, e, name, a in slices:
        assert name.split()[0] == a["step"] and e >= b
    rtt = [(b, e) for _, b, e, _, a in slices if a["step"] == "RTT"]
    assert len(rtt) == 1 and rtt[0][1] - rtt[0][0] == ex["rtt_ns"]
    # The path segments of rtp.json's example are those slices' times (each segment of a step lies
    # inside one of its occurrences).
    t0 = rtt[0][0]
    for g in ex["segments"]:
        if g.get("step"):
            occ = [(b, e) for _, b, e, _, a in slices if a["step"] == g["step"]]
            assert any(b <= t0 + g["begin_ns"] + 1 and t0 + g["begin_ns"] + g["dur_ns"] <= e + 1 for b, e in occ), g
    on_threads = {tracks[u].thread.thread_name.split()[0] for u, *_ in instants if u in threads}
    assert on_threads == {"client", "server"}
    outs = collections.Counter(f for *_, fo, _ in instants for f in fo)
    ins = collections.Counter(f for *_, fi in instants for f in fi)
    assert outs and set(outs) == set(ins) and max(outs.values()) == 1 and max(ins.values()) == 1
    kinds = {(src, dst) for (_, _, src, _, fo, _) in instants for (_, _, dst, _, _, fi) in instants
             if set(fo) & set(fi)}
    assert ("net_dev_xmit", "netif_receive_skb") in kinds and ("sched_waking", "sched_switch") in kinds


@pytest.mark.parametrize("case", ["udp-maxarg-0", "tcp-maxarg-4016"])
def test_every_call_exported_gives_back_the_step_tables_medians(run, steps, tmp_path, case):
    """--calls 0:N-1 (the whole case): per step, the median over the calls of its slices' summed
    durations is steps.json's median_us, over as many calls as its n."""
    rtt = next(r for r in steps["rtt"] if r["case"] == case)
    n = rtt["rpcs"]
    out = tmp_path / "all.perfetto-trace"
    rc, text = _run_cli(["export", str(run), "--case", case, "--calls", f"0:{n - 1}", "--out", str(out)])
    assert rc == 0, text
    _, slices, _ = read_back(out)
    per = collections.defaultdict(lambda: collections.defaultdict(int))
    for _, b, e, _, a in slices:
        per[a["step"]][a["call"]] += e - b
    rows = [r for r in steps["steps"] if r["case"] == case and r["status"] == "measured"]
    assert rows
    for r in rows:
        durs = np.asarray(list(per[r["step"]].values()), float) / 1000.0
        assert len(durs) == r["n"], r["step"]
        assert float(np.percentile(durs, 50)) == pytest.approx(r["median_us"], abs=1e-9), r["step"]


def test_bad_requests_say_what_to_do(run, capsys):
    assert main(["export", str(run), "--case", "udp-maxarg-7", "--call", "0"]) == 2
    err = capsys.readouterr().err
    assert "no case 'udp-maxarg-7'" in err and "udp-maxarg-0" in err and "Traceback" not in err
    assert main(["export", str(run), "--case", "udp-maxarg-0", "--call", "100000"]) == 2
    assert "has calls 0 to " in capsys.readouterr().err
    assert main(["export", str(run), "--case", "udp-maxarg-0", "--calls", "5:2"]) == 2
    assert "give A:B" in capsys.readouterr().err
    assert main(["export", str(run), "--case", "udp-maxarg-0", "--call-id", "12345"]) == 2
    assert "no measured call with id 12345" in capsys.readouterr().err
    assert not (run / "export").exists()
