"""The ftrace kernel collector (collectors/ftrace.py): the ring buffer's pages parsed by hand-built
pages with known answers; a real tracefs instance recording a real child, its dump converted to CTF
and read back by babeltrace2 against the instance's own text output; bad dumps refused; no instance
left behind."""
import json
import os
import re
import struct
import subprocess
import sys

import pytest

from rpcscope.collectors import ftrace, perf
from rpcscope.output import UserError

PAGE = ftrace.PAGE_SIZE
root_tracefs = pytest.mark.skipif(os.geteuid() != 0 or not ftrace.available(), reason="needs root and tracefs")


def _event(etype, pid, extra=b"", delta=0):
    """A ring-buffer data event: 32-bit header (type_len = words of data, time_delta) and the data:
    common_type, flags, preempt count, common_pid, then extra."""
    data = struct.pack("<HBBi", etype, 0, 0, pid) + extra
    data += b"\0" * (-len(data) % 4)
    return struct.pack("<I", (len(data) // 4) | (delta << 5)) + data


def _page(ts, body, commit_flags=0, missed=None):
    size = len(body)
    page = struct.pack("<Qq", ts, size | commit_flags) + body
    if missed is not None:
        page += struct.pack("<Q", missed)
    return page.ljust(PAGE, b"\0")


def test_pages_with_deltas_extends_padding_and_long_events():
    long_extra = b"x" * 200                                   # > 28 words: type_len 0, length in array[0]
    data = struct.pack("<HBBi", 7, 0, 0, 42) + long_extra
    long_ev = struct.pack("<II", 0 | (5 << 5), len(data) + 4) + data
    extend = struct.pack("<II", ftrace.TIME_EXTEND | (3 << 5), 2)   # + (2 << 27) + 3
    pad = struct.pack("<II", ftrace.PADDING | (1 << 5), 8) + b"\0" * 4       # array[0]: bytes after the header
    body = _event(7, 42, delta=10) + long_ev + extend + _event(7, 43, delta=1) + pad + _event(9, 44, delta=2)
    events, lost, where = ftrace.parse_cpu(_page(1000, body), {7: 0, 9: 1})
    assert [(ts, t) for ts, t, _ in events] == [(1010, 7), (1015, 7), (1015 + (2 << 27) + 3 + 1, 7),
                                                 (1015 + (2 << 27) + 3 + 1 + 2, 9)]
    assert [struct.unpack_from("<i", d, 4)[0] for _, _, d in events] == [42, 42, 43, 44]
    assert len(events[1][2]) == len(data) and lost == 0 and where == []


def test_missed_events_are_counted_where_they_happened():
    p1 = _page(100, _event(7, 1, delta=1))
    p2 = _page(500, _event(7, 2, delta=1), ftrace.RB_MISSED_EVENTS | ftrace.RB_MISSED_STORED, missed=17)
    p3 = _page(900, _event(7, 3, delta=1), ftrace.RB_MISSED_EVENTS)              # count not stored: 1
    events, lost, where = ftrace.parse_cpu(p1 + p2 + p3, {7: 0})
    assert [ts for ts, _, _ in events] == [101, 501, 901]
    assert lost == 18 and where == [(1, 17), (2, 1)]


def test_damaged_pages_and_unknown_events_are_skipped_and_a_cut_dump_refused(tmp_path):
    bad = struct.pack("<I", 20 | (1 << 5)) + b"\0" * 8             # says 80 bytes, the page holds 8
    pages = _page(100, _event(7, 1, delta=1) + _event(8, 1, delta=1)) + _page(200, bad) + \
        _page(300, _event(7, 2, delta=1))
    events, lost, _ = ftrace.parse_cpu(pages, {7: 0})
    assert [ts for ts, _, _ in events] == [101, 301] and lost == 0
    events, _, _ = ftrace.parse_cpu(pages[:PAGE + 10], {7: 0})    # a page cut short: no struct.error
    assert [ts for ts, _, _ in events] == [101]
    (tmp_path / "formats.json").write_text(json.dumps({"x:y": {"id": 7, "fields": []}}))
    (tmp_path / "tgids.json").write_text("{}")
    (tmp_path / "cpu0.raw").write_bytes(pages[:PAGE + 10])
    with pytest.raises(UserError, match="cut short"):
        ftrace.convert_to_ctf(tmp_path, tmp_path / "ctf")


def test_a_dump_without_its_formats_is_refused(tmp_path):
    (tmp_path / "cpu0.raw").write_bytes(_page(1, b""))
    with pytest.raises(UserError, match="no complete dump"):
        ftrace.convert_to_ctf(tmp_path, tmp_path / "ctf")


@root_tracefs
def test_a_recorded_child_reads_back_through_babeltrace(tmp_path):
    evs = ["syscalls:sys_enter_getppid", "syscalls:sys_exit_getppid", "sched:sched_switch"]
    rec = ftrace.FtraceRecorder(evs, ["lo"], procnames=("rpcs-fttest",), buffer_kb=4096)
    child = ("import ctypes, os, sys\nctypes.CDLL(None).prctl(15, b'rpcs-fttest', 0, 0, 0)\n"
             "for _ in range(3000): os.getppid()\nprint(os.getpid())\n")
    rec.start()
    try:
        assert rec.path.is_dir() and "[mono]" in (rec.path / "trace_clock").read_text()
        rec.enable()
        pid = int(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
        rec.disable()
        text = [ln for ln in (rec.path / "trace").read_text().splitlines() if not ln.startswith("#")]
        assert rec.written() == len(text)
        raw = rec.dump(tmp_path / "raw")
    finally:
        rec.stop()
    assert not rec.path.exists()
    rec.stop()                                                # idempotent
    counts, lost = ftrace.convert_to_ctf(raw, tmp_path / "ctf")
    assert lost == 0 and counts["syscalls:sys_enter_getppid"] == counts["syscalls:sys_exit_getppid"] == 3000
    assert sum(counts.values()) == len(text)
    out = subprocess.run(["babeltrace2", str(tmp_path / "ctf")], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == len(text)
    exits = [ln for ln in lines if "sys_exit_getppid" in ln]
    assert all(f"perf_tid = {pid}" in ln and f"ret = {os.getpid()}" in ln for ln in exits), exits[:2]
    # The instance's text output and the CTF agree on every timestamp (the text shows them rounded to
    # the microsecond).
    t_text = sorted((ln.split("]")[1].split(":")[0].strip().split()[-1] for ln in text), key=float)
    cycles = subprocess.run(["babeltrace2", "--clock-cycles", str(tmp_path / "ctf")], capture_output=True, text=True,
                            check=True).stdout
    t_ctf = sorted(int(m) for m in re.findall(r"^\[(\d+)\]", cycles, re.M))
    assert [f"{(t + 500) // 1000 / 1e6:.6f}" for t in t_ctf] == t_text


@root_tracefs
def test_an_instance_with_events_off_while_paused_registers_them_only_while_it_records(tmp_path):
    # A paused instance whose events stay enabled still runs every hit through its filter (the runs
    # beside a traced run's paused turns pay for it); with events_off_while_paused its events are
    # enabled only between resume() and pause(), and what they record in those stretches is kept.
    evs = ["syscalls:sys_enter_getppid", "syscalls:sys_exit_getppid"]
    rec = ftrace.FtraceRecorder(evs, ["lo"], procnames=("rpcs-fttest",), buffer_kb=1024,
                                events_off_while_paused=True)
    child = ("import ctypes, os\nctypes.CDLL(None).prctl(15, b'rpcs-fttest', 0, 0, 0)\n"
             "for _ in range(100): os.getppid()\n")

    def enabled():
        return [(rec.path / "events" / e.replace(":", "/") / "enable").read_text().strip() for e in evs]
    rec.start()
    try:
        assert enabled() == ["0", "0"]
        for _ in range(2):
            rec.resume()
            assert enabled() == ["1", "1"]
            subprocess.run([sys.executable, "-c", child], check=True)
            rec.pause()
            assert enabled() == ["0", "0"]
            subprocess.run([sys.executable, "-c", child], check=True)     # paused: not recorded
        raw = rec.dump(tmp_path / "raw")
    finally:
        rec.stop()
    assert not rec.path.exists()
    counts, lost = ftrace.convert_to_ctf(raw, tmp_path / "ctf")
    assert lost == 0 and counts["syscalls:sys_enter_getppid"] == counts["syscalls:sys_exit_getppid"] == 200


@root_tracefs
def test_an_unknown_tracepoint_fails_at_start_and_leaves_no_instance():
    rec = ftrace.FtraceRecorder(["syscalls:sys_enter_getppid", "nosuch:event"], ["lo"])
    with pytest.raises(UserError, match="nosuch"):
        rec.start()
    assert not rec.path.exists()
    assert not list((perf.TRACEFS / "instances").glob(f"rpcscope-{os.getpid()}-*"))


def test_formats_json_round_trips(tmp_path):
    fields = [["name", "loc", 8, 4, 0], ["len", "int", 12, 4, 0], ["comm", "str", 16, 16, 0]]
    (tmp_path / "formats.json").write_text(json.dumps({"net:x": {"id": 5, "fields": fields}}))
    (tmp_path / "tgids.json").write_text(json.dumps({"9": 8}))
    extra = struct.pack("<II", (4 << 16) | 32, 1500) + b"comm\0".ljust(16, b"\0") + b"eth0"
    (tmp_path / "cpu1.raw").write_bytes(_page(50, _event(5, 9, extra, delta=5)))
    counts, lost = ftrace.convert_to_ctf(tmp_path, tmp_path / "ctf")
    assert counts == {"net:x": 1} and lost == 0
    out = subprocess.run(["babeltrace2", str(tmp_path / "ctf")], capture_output=True, text=True, check=True).stdout
    assert 'cpu_id = 1' in out and 'perf_tid = 9, perf_pid = 8, name = "eth0", len = 1500, comm = "comm"' in out, out


def test_the_lean_event_set_leaves_out_only_what_full_adds():
    """perf.event_set, shared by the perf, ftrace and LTTng kernel collectors: "full" is "lean" plus
    FULL_ONLY_EVENTS, in one stable order; an unknown set is refused."""
    lean, full = perf.event_set(0), perf.event_set(0, detail="full")
    assert set(full) - set(lean) == set(perf.FULL_ONLY_EVENTS) and set(lean) < set(full)
    assert lean == [e for e in full if e in lean]
    assert {"net:net_dev_xmit", "net:netif_receive_skb", "sched:sched_waking", "sched:sched_switch"} <= set(lean)
    assert perf.event_set(1, True, detail="lean")[-2:] == list(perf.QDISC_EVENTS)
    with pytest.raises(ValueError, match="kernel event set 'some'"):
        perf.event_set(0, detail="some")
