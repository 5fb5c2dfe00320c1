"""The clock build's marks (rpc/clockmark.c, make TRACE=clock) read back and timed per step
(analysis/clockreads.py): on hand-written mark files with known answers, and on a real run of the
clock build over loopback (its marks as rpc-server and rpc-client write them)."""
import gzip
import json
import subprocess
import types

import numpy as np
import pytest

from rpcscope.analysis.clockreads import case_clock_reads, clock_rows, row_marks
from rpcscope.analysis.traceread import TraceError, read_clockmarks

LOOPBACK = "127.0.0.1"

A = 1 << 32           # activity 1: call ids 1<<32 | sequence


def _write(path, lines, marks=None, dropped=0, gz=False):
    text = f"rpcscope-clockmarks/1 marks {len(lines) if marks is None else marks} dropped {dropped}\n" + \
        "".join(f"{ev} {tid} {cid} {ts}\n" for ev, tid, cid, ts in lines)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def _call(seq, t0, c5_ns, s4_ns, frags=1):
    """One call's marks: client thread 10, server thread 20 (its listener's first mark before the call
    id is known: 0), C5 taking c5_ns, S4 s4_ns per fragment over frags fragments, RTT 10 us."""
    cid = A | seq
    client = [("c1_begin", 10, cid, t0), ("c1_end", 10, cid, t0 + 20),
              ("c5_begin", 10, cid, t0 + 100), ("c5_end", 10, cid, t0 + 100 + c5_ns),
              ("c21_end", 10, cid, t0 + 10_000)]
    server = []
    t = t0 + 3000
    for _ in range(frags):
        server += [("s4_begin", 20, 0, t), ("s4_end", 20, cid, t + s4_ns)]
        t += 1000
    return client, server


def _files(tmp_path, calls, gz=False):
    client, server = [], []
    for seq, (c5, s4, frags) in enumerate(calls):
        c, s = _call(seq, 100_000 * seq, c5, s4, frags)
        client += c
        server += s
    return (read_clockmarks(_write(tmp_path / "c.txt.gz" if gz else tmp_path / "c.txt", client, gz=gz)),
            read_clockmarks(_write(tmp_path / "s.txt", server)))


def test_steps_timed_per_call_over_the_measured_calls(tmp_path):
    """The first call and the warm-up calls are left out; a per-fragment step is summed per call; a
    server mark without its call id takes the next one on its thread; the RTT spans c1_begin..c21_end."""
    calls = [(5000, 9000, 1), (5000, 9000, 1)] + [(200 + i, 300, 1 + i % 2) for i in range(5)]
    client, server = _files(tmp_path, calls, gz=True)
    rows = clock_rows(client, server, warmup=1)
    assert rows["C1"] == {"median_us": 0.02, "calls": 5}
    assert rows["C5"]["median_us"] == pytest.approx(0.202)                       # 200..204 ns, warm-up's 5000 out
    assert rows["S4"]["median_us"] == pytest.approx(0.3)                         # 300, 600, 300, 600, 300 ns
    assert rows["RTT"] == {"median_us": 10.0, "calls": 5}
    assert "C8" not in rows and "S1" not in rows                                 # kernel-bounded: no user marks


def test_row_marks_come_from_the_catalog():
    marks = row_marks()
    assert marks["C1"] == ("c1_begin", "c1_end") and marks["RTT"] == ("c1_begin", "c21_end")
    assert marks["C7-C9"] == ("c7_begin", "c9_end") and marks["C14-C17"] == ("c14_begin", "c17_end")


def test_a_begin_without_its_end_is_not_paired_with_a_later_one(tmp_path):
    """A begin whose end is missing (the process stopped mid-step, a dropped mark) pairs with nothing:
    the next begin on the thread comes before any end."""
    lines = [("c1_begin", 10, A | 0, 0), ("c21_end", 10, A | 0, 50),
             ("c1_begin", 10, A | 1, 100), ("c5_begin", 10, A | 1, 110),                 # no c5_end
             ("c21_end", 10, A | 1, 200), ("c1_begin", 10, A | 2, 300), ("c5_begin", 10, A | 2, 310),
             ("c5_end", 10, A | 2, 330), ("c21_end", 10, A | 2, 400)]
    client = read_clockmarks(_write(tmp_path / "c.txt", lines))
    server = read_clockmarks(_write(tmp_path / "s.txt", []))
    rows = clock_rows(client, server, warmup=0)
    assert rows["C5"] == {"median_us": 0.02, "calls": 1}
    assert rows["RTT"] == {"median_us": 0.1, "calls": 2}


def test_unreadable_mark_files_say_what_and_where(tmp_path):
    with pytest.raises(TraceError, match="cannot read the clock marks"):
        read_clockmarks(tmp_path / "missing.txt.gz")
    (tmp_path / "other.txt").write_text("CTF or something\n")
    with pytest.raises(TraceError, match="not a clock-marks file"):
        read_clockmarks(tmp_path / "other.txt")
    # a file cut short: the torn last line is counted, the rest read
    p = _write(tmp_path / "torn.txt", [("c1_begin", 10, A, 5), ("c1_end", 10, A, 25)], marks=3)
    p.write_text(p.read_text() + "c21_end 10 42")
    got = read_clockmarks(p)
    assert len(got["ts"]) == 2 and got["torn"] == 1 and got["marks"] == 3
    # a compressed file cut short (a disk filled while it was written): named, not a traceback
    z = _write(tmp_path / "cut.txt.gz", [("c1_begin", 10, A, i) for i in range(5000)], gz=True)
    z.write_bytes(z.read_bytes()[:200])
    with pytest.raises(TraceError, match="cut.txt.gz: cannot read the clock marks"):
        read_clockmarks(z)


def test_the_clock_build_over_loopback(rpc_bin, rpc_server, tmp_path):
    """The clock build's own marks: rpc-server and rpc-client with RPCS_CLOCKMARK_OUT, 300 calls of
    UDP maxarg 8032 (two fragments); every measured call timed, none dropped, each one-mark-pair
    step a clock read or little more, the RTT above the sum of the client's steps and within the
    client's own timing of each call."""
    srv = rpc_server(trace="clock", executors=0, env={"RPCS_CLOCKMARK_OUT": str(tmp_path / "s.txt")})
    cp = subprocess.run([str(rpc_bin("rpc-client", "clock")), "--server", LOOPBACK, "--port", str(srv.port),
                         "--transport", "udp", "--proc", "maxarg", "--size", "8032", "--calls", "300",
                         "--warmup", "20", "--json"], capture_output=True, text=True, timeout=60,
                        env={"RPCS_CLOCKMARK_OUT": str(tmp_path / "c.txt"), "PATH": "/usr/bin:/bin"})
    assert cp.returncode == 0, cp.stderr
    srv.stop()
    client, server = read_clockmarks(tmp_path / "c.txt"), read_clockmarks(tmp_path / "s.txt")
    assert client["dropped"] == server["dropped"] == 0 and client["torn"] == server["torn"] == 0
    rows = clock_rows(client, server, warmup=20)
    assert rows["RTT"]["calls"] == 300 and rows["S4"]["calls"] == 300
    assert 0 < rows["C1"]["median_us"] < 1.0 and rows["RTT"]["median_us"] > rows["C7-C9"]["median_us"] > 0
    # Each measured call's c1_begin..c21_end lies inside the client's own t0..t1 around proc_call, so
    # the k-th smallest mark span is at most the k-th smallest client RTT. rpc/bench.c's p50 is the
    # lower median (sorted[(n - 1) / 2]); np.median averages the two middle calls, which on a bimodal
    # run can sit microseconds above it (CI: 37.7 against 35.1 us), so compare like with like.
    idx = {n: i for i, n in enumerate(client["names"])}
    at = {ev: dict(zip(client["call_id"][client["name"] == idx[ev]].tolist(),
                       client["ts"][client["name"] == idx[ev]].tolist())) for ev in ("c1_begin", "c21_end")}
    measured = sorted(at["c1_begin"], key=lambda cid: cid & 0xFFFFFFFF)[1 + 20:]
    spans = sorted(at["c21_end"][cid] - at["c1_begin"][cid] for cid in measured)
    assert len(spans) == 300 and rows["RTT"]["median_us"] == pytest.approx(np.median(spans) / 1000)
    res = json.loads(cp.stdout.strip().splitlines()[-1])
    assert spans[(len(spans) - 1) // 2] <= res["rtt_ns"]["p50"]


def test_the_clock_build_in_ring_mode_over_loopback(rpc_bin, rpc_server, tmp_path):
    """RPCS_CLOCKMARK_RING=1, as the capture's rounds run the clock build: the marks go round a ring and
    only the latest are written, the rest counted as dropped, the latest client marks those of the last
    calls, in order."""
    env = {"RPCS_CLOCKMARK_RING": "1"}
    srv = rpc_server(trace="clock", executors=0, env={**env, "RPCS_CLOCKMARK_OUT": str(tmp_path / "s.txt")})
    cp = subprocess.run([str(rpc_bin("rpc-client", "clock")), "--server", LOOPBACK, "--port", str(srv.port),
                         "--transport", "tcp", "--proc", "maxarg", "--size", "0", "--calls", "300",
                         "--warmup", "20", "--json"], capture_output=True, text=True, timeout=60,
                        env={**env, "RPCS_CLOCKMARK_OUT": str(tmp_path / "c.txt"), "PATH": "/usr/bin:/bin"})
    assert cp.returncode == 0, cp.stderr
    srv.stop()
    for role in ("c", "s"):
        marks = read_clockmarks(tmp_path / f"{role}.txt")
        assert marks["marks"] == len(marks["ts"]) == 256 and marks["dropped"] > 300 * 5, (role, marks["dropped"])
    client = read_clockmarks(tmp_path / "c.txt")
    assert (np.diff(client["ts"]) >= 0).all()        # one thread: in time order (the server's two interleave)
    assert int(client["call_id"].max()) - int(client["call_id"].min()) < 40       # the last calls only


def test_a_case_without_clock_reads_or_with_broken_ones(tmp_path):
    """case_clock_reads: None where the capture made no clock run; the capture's own error where the run
    failed; the reader's where its files are gone; else the rows and the run's figures."""

    def case(meta):
        return types.SimpleNamespace(meta=dict(meta, dir="cases/x"), run=types.SimpleNamespace(path=tmp_path),
                                     warmup=1)
    assert case_clock_reads(case({})) is None
    assert case_clock_reads(case({"clock_reads": {"error": "no clock build"}})) == {"error": "no clock build"}
    files = {"client": "clock-client.txt.gz", "server": "clock-server.txt.gz"}
    got = case_clock_reads(case({"clock_reads": {"files": files, "client_p50_ns": 10000}}))
    assert "cannot read the clock marks" in got["error"]
    (tmp_path / "cases" / "x").mkdir(parents=True)
    client, server = [], []
    for seq in range(4):
        c, s = _call(seq, 100_000 * seq, 200, 300)
        client += c
        server += s
    _write(tmp_path / "cases" / "x" / files["client"], client, gz=True)
    _write(tmp_path / "cases" / "x" / files["server"], server, gz=True)
    got = case_clock_reads(case({"clock_reads": {"files": files, "client_p50_ns": 10000}}))
    assert got["rows"]["RTT"] == {"median_us": 10.0, "calls": 2} and got["client_p50_us"] == 10.0
    assert got["marks"] == len(client) + len(server) and got["dropped"] == got["torn"] == 0
