"""`rpcscope capture`'s other collectors and modes on the local testbed, for real: the ftrace collector
records every packet and the calls rebuild from it, a capture taking turns traces every call of its
turns, a capture through Ansible on the testbed's inventory; and the parts that need no testbed: the
LTTng kernel collector's command lines, UST buffer sizes, perf's persistent session, the wait for
trace files to close, the clock reads' refusals and records. test_capture.py checks a perf capture's
run directory.

Safety: as test_capture.py (the machine-wide testbed test lock; the testbed down at the end).
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import types

import pytest
from helpers import (
    CAPTURE_MARKS,
    REPO,
    capture_leftovers,
    ftrace_instances,
    kernel_events,
    module_testbed,
    rpcscope,
    sh,
)

from rpcscope import testbed as testbed_package
from rpcscope.analysis.run import level_p50_ns
from rpcscope.analysis.steps import analyze
from rpcscope.collectors import capture as cap, lttng as clttng, options, perf  # options: the preflight checks
from rpcscope.collectors.capture import MIN_TURNS_ROUNDS
from rpcscope.output import UserError
from rpcscope.testbed.config import DEFAULT_CLIENT as CLIENT, DEFAULT_SERVER as SERVER

pytestmark = CAPTURE_MARKS


@pytest.fixture(scope="module")
def testbed():
    """The testbed, up for this module only; one testbed test module at a time on this machine."""
    with module_testbed():
        yield


def test_lttng_kernel_command_lines():
    """The LTTng-kernel collector (lttng-modules cannot load here): its command lines as documented."""
    cmds = clttng.lttng_kernel_commands("s", "/o/kernel", ["net:net_dev_xmit", "net:netif_receive_skb",
                                                            "sched:sched_switch", "sched:sched_waking",
                                                            "irq:softirq_entry", "skb:skb_copy_datagram_iovec",
                                                            "qdisc:qdisc_dequeue"],
                                        ["sendto", "recvfrom"], ["rpcs-c0", "rpcs-s0"], ["rpc-client", "rpc-server"])
    assert cmds[0] == ["create", "s", "--output=/o/kernel"]
    assert cmds[1][:2] == ["enable-channel", "--kernel"] and "--discard" in cmds[1] and cmds[1][-1] == "rpcs_kernel"
    assert cmds[2] == ["add-context", "--kernel", "--session=s", "--channel=rpcs_kernel",
                       "--type", "pid", "--type", "tid", "--type", "procname"]
    assert cmds[3] == ["enable-event", "--kernel", "--session=s", "--channel=rpcs_kernel", "--syscall",
                       "sendto,recvfrom",
                       '--filter=$ctx.procname == "rpc-client" || $ctx.procname == "rpc-server"']
    by_events = {c[4]: c[5] for c in cmds[4:]}
    # lttng-modules spells netif_receive_skb net_if_receive_skb
    assert by_events["net_dev_xmit,net_if_receive_skb"] == '--filter=name == "rpcs-c0" || name == "rpcs-s0"'
    assert by_events["sched_switch"] == ('--filter=prev_comm == "rpc-client" || prev_comm == "rpc-server" || '
                                         'next_comm == "rpc-client" || next_comm == "rpc-server"')
    assert by_events["sched_waking"] == '--filter=comm == "rpc-client" || comm == "rpc-server"'
    assert by_events["irq_softirq_entry"] == "--filter=vec == 3"
    assert "skb_copy_datagram_iovec" in by_events
    assert not any("qdisc" in " ".join(c) for c in cmds)   # lttng-modules has no qdisc probes
    # Every subcommand and option is one lttng 2.13 documents (its own --help says so).
    for c in cmds:
        helptext = subprocess.run(["lttng", c[0], "--help"], capture_output=True, text=True, timeout=30).stdout
        for opt in c[1:]:
            if opt.startswith("--"):
                assert opt.split("=")[0] in helptext, (c[0], opt)


def test_ust_buffers_hold_every_event():
    sub, num = clttng.ust_buffer_size(10_200)
    assert num == 8 and sub & (sub - 1) == 0
    assert sub * num >= 10_200 * 2 * clttng.UST_EVENTS_PER_CALL * clttng.UST_EVENT_BYTES


def test_ftrace_collector_records_every_packet_and_the_calls_rebuild(testbed, tmp_path):
    """--kernel ftrace (collectors/ftrace.py): the same events as perf, in perf's CTF dialect; the
    kernel trace holds both hosts' syscalls and every packet, the analysis rebuilds the calls whole,
    and the case's tracefs instance is gone afterwards."""
    out = tmp_path / "ftrace"
    before = ftrace_instances()
    rpcscope("capture", "--sizes", "0,4016", "--transport", "udp,tcp", "--calls", "300", "--warmup", "30",
             "--kernel", "ftrace", "--calibration", "quick", "--calibration-calls", "500", "--repeats", "1",
             "--user-only-runs", "--kernel-events", "full", "--clock-reads", "--out", str(out), timeout=600)
    assert ftrace_instances() == before
    m = json.loads((out / "manifest.json").read_text())
    # --user-only-runs: every round also ran with user events only, kept for the record.
    assert m["calibration_in_situ"] == {"method": "per case", "complete": True, "user_only_runs": True}
    for c in m["cases"]:
        assert c["repeats"]["order"] == ["untraced-0", "clock-0", "ust-0", "traced-0"], c["repeats"]
        assert c["ust_only"]["p50"] == c["repeats"]["ust_p50_ns"][0] > 0, c
    assert m["complete"] and m["kernel_collector"] == "ftrace" and m["kernel_clock_aligned_to_ust"]
    assert all("all" in h["kernel_event_ns"] for h in m["calibration"].values()), m["calibration"]
    devs = {h["role"]: h["ifname"] for h in m["hosts"].values()}
    for c in m["cases"]:
        assert c["losses"]["kernel_lost"] == 0 and c["events"]["kernel"] > 0, c
        events = kernel_events(out / c["dir"] / "kernel")
        assert len(events) == c["events"]["kernel"]
        total = 300 + 30
        by_pid = collections.Counter((e, pid) for e, pid, _ in events)
        for pid in (c["pids"]["client"], c["pids"]["server"]):
            assert sum(by_pid[(e, pid)] for e in ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg")) >= total
        dev = collections.Counter((e, d) for e, _, d in events if d)
        assert dev[("net:net_dev_xmit", devs["client"])] == dev[("net:netif_receive_skb", devs["server"])] >= total
        assert dev[("net:net_dev_xmit", devs["server"])] == dev[("net:netif_receive_skb", devs["client"])] >= total
        # --kernel-events full: every device of the path, the bridge's side of each veth pair too, with
        # its start of transmit, and the scheduler's sched_wakeup.
        assert sorted(m["testbed"]["devices"]) == sorted({d for _, _, d in events if d}), (c["id"], dev)
        for d in m["testbed"]["devices"]:
            assert dev[("net:net_dev_start_xmit", d)] == dev[("net:net_dev_xmit", d)] > 0, (c["id"], d, dev)
        assert sum(1 for e, _, _ in events if e == "sched:sched_wakeup") > 0, c["id"]
        assert not list((out / c["dir"]).rglob("kernel.ftrace"))          # the raw dump is converted, then gone
    res = analyze(out, write=False)
    for x in res["rtt"]:
        assert x["complete_rpcs"] >= 0.8 * x["rpcs"], (x["case"], x["incomplete_by_first_missing_step"])
    # --clock-reads: the clock build in every round (its p50 in repeats; a ring of marks, the anchor's),
    # then one run of each case that keeps every mark, compressed, every measured call's user-mark steps
    # timed; a clock read costs the call far less than a tracepoint.
    for c in m["cases"]:
        cr = c["clock_reads"]
        assert set(cr["files"]) == {"client", "server"} and cr["client_p50_ns"] > 0, cr
        assert cr["marks_from"] == "a run after the rounds that keeps every mark", cr
        # How often the client sleeps a call depends on how soon its reply comes: counted, not prescribed.
        assert c["repeats"]["clock_p50_ns"][0] > 0 and 0 < c["sleeps_per_call"]["clock"]["client"] < 10, \
            c["repeats"]
        assert all((out / c["dir"] / f).is_file() for f in cr["files"].values())
        assert not list((out / c["dir"]).glob("clock-*.txt"))                   # only the .gz are kept
        assert not (out / c["dir"] / "clock-marks").exists()
        assert cr["client_p50_ns"] < c["traced"]["p50"], (c["id"], cr, c["traced"])
    by = {(r["case"], r["step"]): r for r in res["steps"]}
    for x in res["rtt"]:
        # Every mark of 330 calls, not a ring's 256.
        assert x["clock_reads"]["dropped"] == 0 and x["clock_reads"]["marks"] > 330 * 10, x["clock_reads"]
        # Each step bounded by user marks is timed from the clock reads; the whole call, with its dozens of
        # marks, is faster with clock reads than with tracepoints. (A sub-microsecond step such as C5 is
        # timed alike both ways, each run within the other's noise.)
        for step in ("C1", "C5", "S4"):
            r = by[(x["case"], step)]
            assert 0 < r["clock_reads_median_us"] and r["median_us"] > 0, (x["case"], step, r)
        r = by[(x["case"], "RTT")]
        assert 0 < r["clock_reads_median_us"] < r["median_us"], (x["case"], r)
        assert by[(x["case"], "C8")]["clock_reads_median_us"] is None          # kernel-bounded: no user marks
    p = rpcscope("capture", "--inventory", str(REPO / "ansible" / "inventories" / "local" / "hosts.yml"),
                 "--kernel", "ftrace", "--sizes", "0", "--out", str(tmp_path / "remote"), check=False)
    assert p.returncode == 2 and "local testbed only" in p.stderr, p.stderr


def test_capture_taking_turns_traces_every_call_of_its_turns(testbed, tmp_path):
    """--turns: every size and kind of a round at once, in turns of --turn-calls; each traced run's
    tracefs instance records only its turns, yet holds every call's packets and syscalls; one round is
    kept for every size, the rounds' speeds recorded; nothing is left behind. A --deadline-seconds that
    no round fits cuts the rounds asked (5) to MIN_TURNS_ROUNDS (4), and says so."""
    out = tmp_path / "turns"
    before = ftrace_instances()
    p = rpcscope("capture", "--sizes", "0,4016", "--transport", "udp,tcp", "--calls", "300", "--warmup", "30",
                 "--kernel", "ftrace", "--calibration", "quick", "--calibration-calls", "500", "--repeats", "5",
                 "--deadline-seconds", "1", "--clock-reads", "--turns", "--turn-calls", "10", "--out", str(out),
                 timeout=600)
    assert "taking turns of 10 calls" in p.stdout, p.stdout
    assert MIN_TURNS_ROUNDS == 4 and p.stdout.count("4 rounds (of 5 asked: the capture's deadline, 1 s") == 2, p.stdout
    assert ftrace_instances() == before and capture_leftovers(out) == []
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and m["params"]["turns"] and m["params"]["turn_calls"] == 10
    total = 300 + 30
    for t in ("udp", "tcp"):
        sw = m["sweeps"][t]
        assert sw["ended"] == "capture deadline" and sw["rounds"] == 4 and sw["rounds_asked"] == 5, sw
        assert sw["extra_rounds"] == 0 and sw["agreeing_rounds"] == [0, 1, 2, 3] and len(sw["seconds"]) == 4
        assert sw["turns"]["runs_per_round"] == 6 and len(sw["turns"]["round_speed"]) == 4       # 2 sizes x 3 kinds
        assert set(sw["kept_by_case"].values()) == {sw["kept_round"]}                            # one round for all
    devs = {h["role"]: h["ifname"] for h in m["hosts"].values()}
    for c in m["cases"]:
        rep = c["repeats"]
        assert rep["kept_round"] == m["sweeps"][c["transport"]]["kept_round"]
        # 1 + 30 + 300 calls in turns of 10: 34 turns a run, every run of every round; a traced run's
        # turns are TRACED_TURN_EVERY times as long (50 calls: 7 turns)
        traced = -(-(1 + total) // (10 * options.TRACED_TURN_EVERY))
        assert all(n == ([traced] if k.startswith("traced") else [34]) * 4
                   for k, n in rep["turns"].items() if k.endswith("_turns")), rep["turns"]
        assert level_p50_ns(c, "untraced") > 0 and 0 < c["sleeps_per_call"]["untraced"]["client"] < 10
        assert c["losses"]["kernel_lost"] == 0 and not c["lossy"] and c["events"]["kernel"] > 0, c
        events = kernel_events(out / c["dir"] / "kernel")
        by_pid = collections.Counter((e, pid) for e, pid, _ in events)
        for pid in (c["pids"]["client"], c["pids"]["server"]):
            assert sum(by_pid[(e, pid)] for e in ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg")) >= total
        dev = collections.Counter((e, d) for e, _, d in events if d)
        sent, received = dev[("net:net_dev_xmit", devs["client"])], dev[("net:netif_receive_skb", devs["server"])]
        # Every call's packets lie inside a turn. A packet after a call's end (a TCP ACK) can cross the
        # pause that ends a turn: recorded leaving the client, not arriving (or the reverse at a resume).
        assert sent >= total and received >= total and abs(sent - received) <= traced, (sent, received, traced)
    res = analyze(out, write=False)
    for x in res["rtt"]:
        assert x["complete_rpcs"] >= 0.9 * x["rpcs"], (x["case"], x["incomplete_by_first_missing_step"])
        assert x["took_turns"], x            # the model lets a step's cost fall with the bytes (slope_floor)


def test_capture_through_ansible_on_the_testbed_inventory(testbed, tmp_path):
    """ansible/capture.yml, as on real hosts: each host its own session and perf; traces fetched per host.
    (On this testbed the hosts share a kernel and a session daemon, so each host's traces also hold the
    other's events; real hosts do not.)"""
    inv = REPO / "ansible" / "inventories" / "local" / "hosts.yml"
    out = tmp_path / "remote"
    try:
        d = rpcscope("deploy", "--json", timeout=900)
        assert json.loads(d.stdout)["ok"], d.stdout[-3000:]
        rpcscope("capture", "--inventory", str(inv), "--kernel", "perf", "--sizes", "0", "--calls", "200",
                 "--warmup", "20", "--out", str(out), timeout=900)
    finally:
        # Stop what deploy started (its lttng-sessiond), as test_testbed does.
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
               "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), "teardown.yml"],
                       cwd=REPO / "ansible", env=env, capture_output=True, timeout=300)
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and m["testbed"]["kind"] == "inventory" and not m["testbed"]["shared_kernel"]
    assert set(m["hosts"]) == {CLIENT, SERVER} and all(h["kernel"] and h["cpu_model"] for h in m["hosts"].values())
    (case,) = m["cases"]
    cdir = out / case["dir"]
    for f in (f"client-traced-{CLIENT}.json", f"client-untraced-{CLIENT}.json"):
        r = json.loads((cdir / f).read_text())
        assert r["calls"] == 200 and r["errors"] == 0 and r["aslr"] == "off"     # capture_aslr's default
    for h in (CLIENT, SERVER):
        for sub in (f"ust-{h}", f"kernel-{h}"):
            p = sh("babeltrace2", str(cdir / sub), "-c", "sink.utils.counter", timeout=300)
            assert p.returncode == 0 and re.search(r"[1-9]\d* Event messages", p.stdout), (sub, p.stderr)
    assert case["losses"] == {"ust_discarded": 0, "ust_lost_packets": 0, "kernel_lost": 0}
    assert capture_leftovers(out) == []


@pytest.mark.skipif(not pathlib.Path("/sys/kernel/tracing/events/syscalls/sys_enter_getppid").is_dir(),
                    reason="needs tracefs with syscall tracepoints (the capture mounts it; make test does)")
def test_persistent_perf_splits_runs_into_files(tmp_path):
    """The capture's one perf (PerfRecorder persistent=True): events only while enabled, each dump holds
    exactly the events since the previous one, and stop leaves no perf and no stray file."""
    comm = pathlib.Path("/proc/self/comm").read_text().strip()
    work = tmp_path / "perf"
    rec = perf.PerfRecorder(work, work / "k.data", ["syscalls:sys_enter_getppid"], [], procnames=(comm,),
                            persistent=True)
    rec.start()
    try:
        got = []
        for before, during in ((5, 7), (3, 11)):
            for _ in range(before):
                os.getppid()                      # disabled: not recorded
            rec.enable()
            for _ in range(during):
                os.getppid()
            rec.disable()
            got.append(rec.dump(tmp_path / f"run-{len(got)}.perf.data"))
    finally:
        rec.stop()
    assert [perf.stats(p)["samples"].get("syscalls:sys_enter_getppid") for p in got] == [7, 11]
    assert not rec.alive() and not list(work.glob("k.data*")) and not list(work.glob("*.fifo"))


def test_wait_files_closed_waits_for_the_holder_and_names_it(tmp_path):
    """A destroyed LTTng session's trace is read only once no process holds its files (the capture
    destroys sessions without waiting for the session daemon): a holder is waited for, or named."""
    f = tmp_path / "trace" / "stream_0"
    f.parent.mkdir()
    f.touch()
    holder = subprocess.Popen(["sh", "-c", f"exec 3>>{f}; sleep 0.3"])
    try:
        time.sleep(0.05)
        with pytest.raises(UserError, match=str(holder.pid)):
            clttng.wait_files_closed(tmp_path / "trace", timeout=0.05)
        t0 = time.monotonic()
        clttng.wait_files_closed(tmp_path / "trace", timeout=5)
        assert time.monotonic() - t0 > 0.1 and holder.wait(timeout=5) == 0
    finally:
        holder.kill()
        holder.wait()
    clttng.wait_files_closed(tmp_path / "nothing-here", timeout=0)


def test_clock_reads_without_the_clock_build_or_its_marks(tmp_path, monkeypatch):
    """capture --clock-reads without the clock build (make TRACE=clock) is refused before anything runs,
    saying how to make it; a kept round whose clock run left one role's marks unwritten is recorded as the
    case's clock_reads error, no mark file is left, and no exception stops the capture."""
    monkeypatch.setattr(options, "CLOCK_BIN", tmp_path / "no-clock-build")
    monkeypatch.setattr(options.os, "geteuid", lambda: 0)
    monkeypatch.setattr(options.idle.IdlePolicy, "check", lambda self: None)
    monkeypatch.setattr(options, "require_tool", lambda name, fix: None)
    monkeypatch.setattr(testbed_package, "health", lambda st: [])
    with pytest.raises(UserError, match=r"no-clock-build/rpc-server is missing; build it with `make TRACE=clock`"):
        options.preflight({"clock_reads": True, "aslr": "off", "kernel": "none"}, {"hosts": []})
    case = {"id": "udp-maxarg-0", "dir": "cases/udp-maxarg-0", "size": 0, "calls": 10, "warmup": 1}
    rdir = tmp_path / case["dir"] / "repeat-0"
    rdir.mkdir(parents=True)
    (rdir / "clock-client.txt").write_text("rpcscope-clockmarks/1 marks 0 dropped 0\n")
    fake = types.SimpleNamespace(out=tmp_path)
    run = {"res": {"rtt_ns": {"p50": 1000}}, "dir": rdir}
    cap.Capture.keep_clock_marks(fake, case, run)
    assert "server wrote no marks" in case["clock_reads"]["error"], case
    assert not list((tmp_path / case["dir"]).glob("clock-*"))
    (rdir / "clock-server.txt").write_text("rpcscope-clockmarks/1 marks 0 dropped 0\n")
    cap.Capture.keep_clock_marks(fake, case, run)
    assert case["clock_reads"] == {"build": "clock (make TRACE=clock)", "client_p50_ns": 1000, "every_round": True,
                                   "files": {"client": "clock-client.txt.gz", "server": "clock-server.txt.gz"},
                                   "marks_from": "a run after the rounds that keeps every mark",
                                   "rounds_keep": "a ring of the latest marks (rpc/clockmark.h CLOCKMARK_RING_SLOTS)"}
    assert sorted(f.name for f in (tmp_path / case["dir"]).glob("clock-*")) == ["clock-client.txt.gz",
                                                                              "clock-server.txt.gz"]
    # The run that keeps every mark failed: its error is the case's, and its marks are gone.
    cap.Capture.keep_clock_marks(fake, case, {"error": "the clock build's run that keeps every mark failed: boom"})
    assert case["clock_reads"] == {"error": "the clock build's run that keeps every mark failed: boom"}
    assert not list((tmp_path / case["dir"]).glob("clock-*"))
    # The rounds' clock runs keep a ring of marks; the run after them every mark.
    assert cap.clock_env(rdir / "m.txt", ring=True) == ["env", f"RPCS_CLOCKMARK_OUT={rdir / 'm.txt'}",
                                                        "RPCS_CLOCKMARK_RING=1"]
    assert cap.clock_env(rdir / "m.txt") == ["env", f"RPCS_CLOCKMARK_OUT={rdir / 'm.txt'}"]
    assert cap.clock_env(None) == []
