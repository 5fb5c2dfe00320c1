"""Recovery after a hard kill: a capture SIGKILLed mid-way leaves its rpc-server, its LTTng session and its
tracefs instance behind; the next capture and `rpcscope testbed down` find them (the killed capture's
RUN/capture-state.json and /run/rpcscope/captures/PID.json, and what rpcscope recognises as its own),
remove them and say so (collectors/leftovers.py).

Runs on the namespace testbed with the ftrace collector (a tracefs instance per traced run), holding
/tmp/rpcscope-testbed.lock for the whole module so that no other agent's capture runs beside it.
"""
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, RPCSCOPE, is_testbed_up, rpcscope

from rpcscope.collectors import leftovers as lo, lttng as clttng, perf as cperf
from rpcscope.collectors.capture import BASE_PORT
from rpcscope.testbed import held_by_tests
from rpcscope.testbed.config import STATE_DIR

LOCK = "/tmp/rpcscope-testbed.lock"
SERVER_NS = "rpcs-server"

TESTBED_MARKS = [
    pytest.mark.testbed,
    pytest.mark.tracing,
    pytest.mark.skipif(os.geteuid() != 0, reason="capture needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "lttng", "babeltrace2")),
                       reason="needs iproute2, openssh-server, lttng-tools, babeltrace2 (make bootstrap)"),
    pytest.mark.skipif(not (cperf.TRACEFS / "instances").is_dir(), reason="needs tracefs instances (make bootstrap)"),
]


def on_testbed(f):
    for m in TESTBED_MARKS:
        f = m(f)
    return f


def _held_by_an_ancestor(path):
    """Whether a process this one descends from holds the flock on path (`flock LOCK make test`): taking
    it again here would wait for ourselves."""
    try:
        ino = os.stat(path).st_ino
        locks = pathlib.Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    holders = {int(f[4]) for f in (ln.split() for ln in locks if "->" not in ln)
               if len(f) > 5 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(ino)}
    pid = os.getpid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            pid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _take_lock(lock, wait=1200):
    """The agents' testbed lock, unless an ancestor holds it already; skips after `wait` seconds."""
    if _held_by_an_ancestor(LOCK):
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.skip(f"{LOCK} stayed held for {wait} s by another user of the testbed")
            time.sleep(1)


@pytest.fixture(scope="module")
def testbed():
    """The testbed under the agents' lock: the one up (left up), or one brought up here and down at the end."""
    with open(LOCK, "a") as lock:
        _take_lock(lock)
        with held_by_tests(wait=1200):
            was_up = is_testbed_up()
            try:
                if not was_up:
                    rpcscope("testbed", "up", "--json", timeout=180)
                yield was_up
            finally:
                if was_up and not STATE_DIR.exists():
                    rpcscope("testbed", "up", "--json", timeout=180, check=False)
                elif not was_up:
                    rpcscope("testbed", "down", check=False, timeout=180)


def _instances():
    return sorted(p.name for p in (cperf.TRACEFS / "instances").glob("rpcscope-*"))


def _our_processes(run_dir):
    """rpc-server/rpc-client processes started for run_dir (their --ready-file or logs under it)."""
    out = []
    for x in os.listdir("/proc"):
        if not x.isdigit():
            continue
        argv = lo._cmdline(int(x))
        if argv and argv[0].split(b"/")[-1] in (b"rpc-server", b"rpc-client") and \
                any(str(run_dir).encode() in a for a in argv) and lo.start_time(int(x)) is not None:
            out.append(int(x))
    return out


def _untraced_running(run_dir):
    return any(b"/notrace/" in lo._cmdline(p)[0] for p in _our_processes(run_dir))


def _recording(run_dir):
    return bool(_instances()) and any(n.startswith("rpcs-capture-") for n in clttng.session_names())


def _calibrating(run_dir):
    return (run_dir / "calibration").is_dir() and bool(_instances())


def _start_long_capture(out, calibration="none"):
    # Runs of 60000 calls (seconds each), killed in the middle; the ftrace collector: a tracefs instance
    # per traced run. Its servers' --ready-file paths lie under out (absolute here).
    return subprocess.Popen(RPCSCOPE + ["capture", "--sizes", "0", "--calls", "60000", "--warmup", "10", "--repeats",
                                        "1", "--kernel", "ftrace", "--calibration", calibration,
                                        "--calibration-calls", "60000", "--extra-sweep-seconds", "0",
                                        "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _kill_when(proc, ready, what, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the capture ended before {what}: {proc.stderr.read()[-2000:]}")
        if ready():
            proc.send_signal(signal.SIGKILL)           # the capture alone: what it started stays behind
            proc.wait(timeout=30)
            proc.stderr.close()
            return
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=30)
    pytest.fail(f"the capture never reached {what} in {timeout} s")


def _short_capture(out):
    return rpcscope("capture", "--sizes", "0", "--calls", "200", "--warmup", "10", "--repeats", "1",
                    "--kernel", "ftrace", "--calibration", "none", "--extra-sweep-seconds", "0", "--out", str(out),
                    timeout=240, check=False)


@on_testbed
@pytest.mark.parametrize("point", ["untraced run", "traced run recording", "kernel calibration recording"])
def test_capture_after_a_killed_one_removes_its_leftovers_and_says_so(testbed, tmp_path, point):
    killed = tmp_path / "killed"
    proc = _start_long_capture(killed, "quick" if point.startswith("kernel calibration") else "none")
    ready = {"untraced run": lambda: _untraced_running(killed), "traced run recording": lambda: _recording(killed),
             "kernel calibration recording": lambda: _calibrating(killed)}[point]
    _kill_when(proc, ready, point)
    state = json.loads((killed / "capture-state.json").read_text())
    assert state["pid"] == proc.pid and state["processes"], state
    left = _our_processes(killed)
    assert left, "the killed capture's rpc-server should still run"
    if point != "untraced run":
        assert state["tracefs_instances"], state
        assert set(state["tracefs_instances"]) <= set(_instances())
    if point == "traced run recording":
        assert state["lttng_sessions"], state

    p = _short_capture(tmp_path / "next")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "removed the leftovers of a killed capture" in p.stderr, p.stderr
    assert "rpc-server" in p.stderr and f"capture pid {proc.pid}" in p.stderr, p.stderr
    if point != "untraced run":
        assert f"tracefs instance {state['tracefs_instances'][0]}" in p.stderr, p.stderr
    if point == "traced run recording":
        assert f"lttng session {state['lttng_sessions'][0]}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    # Nothing of the killed capture is left, and the new one ended cleanly (its record removed).
    assert not [pid for pid in left if lo.start_time(pid) is not None]
    assert not set(state["tracefs_instances"]) & set(_instances())
    assert not set(state["lttng_sessions"]) & set(clttng.session_names())
    assert not (killed / "capture-state.json").exists() and not (tmp_path / "next" / "capture-state.json").exists()
    assert not (lo.REGISTRY / f"{proc.pid}.json").exists()
    m = json.loads((killed / "manifest.json").read_text())
    assert m["interrupted"] and not m["complete"] and m.get("killed"), m
    nm = json.loads((tmp_path / "next" / "manifest.json").read_text())
    assert nm["complete"] and nm.get("leftovers_removed"), nm


@on_testbed
def test_testbed_down_after_a_kill_removes_the_tracefs_instance(testbed, tmp_path):
    killed = tmp_path / "killed"
    proc = _start_long_capture(killed)
    _kill_when(proc, lambda: _recording(killed), "a traced run recording")
    state = json.loads((killed / "capture-state.json").read_text())
    assert state["tracefs_instances"] and set(state["tracefs_instances"]) <= set(_instances())
    p = rpcscope("testbed", "down", timeout=180)
    for name in state["tracefs_instances"]:
        assert f"removed tracefs instance {name} (left by a killed capture)" in p.stdout, p.stdout
    assert not set(state["tracefs_instances"]) & set(_instances())
    assert not set(state["lttng_sessions"]) & set(clttng.session_names())
    assert not [pid for pid in _our_processes(killed)]
    assert "Traceback" not in p.stdout + p.stderr
    rpcscope("testbed", "up", "--json", timeout=180)


@on_testbed
def test_a_port_held_by_something_else_is_named_not_taken_for_a_leftover(testbed, tmp_path):
    """A port the capture's first server needs, held by a process that is no capture's: the capture says
    so in one line (exit 2) and removes nothing of it."""
    holder = subprocess.Popen(["ip", "netns", "exec", SERVER_NS, sys.executable, "-c",
                               "import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                               f"s.bind(('198.18.0.3', {BASE_PORT + 1})); print('bound', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "bound"
        p = _short_capture(tmp_path / "held")
        assert p.returncode == 2, p.stdout + p.stderr
        assert "Address already in use" in p.stderr and "no leftover of a capture" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and holder.poll() is None
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_the_record_of_a_dead_capture_names_what_is_removed(tmp_path, monkeypatch):
    """No testbed: a dead capture's record (a process it started, still running) read from a registry of
    this test's own; its process is stopped by pid and start time, the run marked, both records removed,
    and a live capture's record left alone."""
    monkeypatch.setattr(lo, "REGISTRY", tmp_path / "registry")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"format": 1, "complete": False, "interrupted": False, "cases": []}))
    left = subprocess.Popen(["sleep", "60"], start_new_session=True)
    gone = subprocess.Popen(["true"])
    gone.wait()                                          # a pid that no longer names a process: the dead capture
    st = lo.CaptureState(run)
    st.copy = lo.REGISTRY / f"{gone.pid}.json"
    st.data.update(pid=gone.pid, pid_start=12345, processes=[{"pid": left.pid, "start": lo.start_time(left.pid),
                                                              "name": "rpc-server"}])
    st._save()
    live = lo.CaptureState(tmp_path)                     # this process: a live capture
    live._save()
    try:
        removed = lo.clean(scan=False)
        assert left.wait(timeout=10) is not None
        assert removed[0] == f"rpc-server of the killed capture pid {gone.pid} ({run}) (pid {left.pid})", removed
        assert any("marked interrupted" in r for r in removed), removed
        m = json.loads((run / "manifest.json").read_text())
        assert m["interrupted"] and m["killed"] and not m["complete"]
        assert not (run / "capture-state.json").exists() and not (lo.REGISTRY / f"{gone.pid}.json").exists()
        assert (lo.REGISTRY / f"{os.getpid()}.json").exists() and lo.clean(scan=False) == []
    finally:
        if left.poll() is None:
            left.kill()
        live.close()
