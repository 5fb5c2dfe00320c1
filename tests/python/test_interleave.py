"""collectors/interleave.py: processes take turns, and none is left stopped however the turns end.
Real processes and real signals; no root needed."""
import subprocess
import sys
import time

import pytest

from rpcscope.collectors import interleave

# Counts loop iterations for D seconds of wall time, then prints the count.
BUSY = "import sys, time\nt = time.time() + float(sys.argv[1]); n = 0\nwhile time.time() < t: n += 1\nprint(n)"


def _busy(seconds):
    return subprocess.Popen([sys.executable, "-c", BUSY, str(seconds)], stdout=subprocess.PIPE, text=True)


def _sleeper():
    return subprocess.Popen(["sleep", "60"])


def test_processes_take_turns_until_all_have_exited():
    procs = [_busy(0.6), _busy(0.6)]
    turns = interleave.take_turns(procs, 0.01, 30)
    assert all(p.wait(timeout=10) == 0 for p in procs)
    # Each ran in turns of 10 ms until it had spent its 0.6 s (stopped time counts: wall time); a
    # loaded machine stretches the turns, so only that both had more than one is asked.
    assert all(t >= 2 for t in turns), turns
    assert all(int(p.stdout.read()) > 0 for p in procs)


def test_the_deadline_ends_the_turns_and_leaves_none_stopped():
    procs = [_sleeper(), _sleeper(), _sleeper()]
    try:
        t0 = time.monotonic()
        turns = interleave.take_turns(procs, 0.01, 0.3)
        assert time.monotonic() - t0 < 5
        assert min(turns) >= 1 and max(turns) - min(turns) <= 1, turns  # round robin over all three
        assert not any(interleave.stopped(p) for p in procs)
        assert all(p.poll() is None for p in procs)                     # alive: take_turns kills nothing
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def test_an_interrupt_during_the_turns_leaves_none_stopped(monkeypatch):
    procs = [_sleeper(), _sleeper()]
    calls = []

    def sleep(s):
        calls.append(s)
        if len(calls) == 4:
            raise KeyboardInterrupt
        time.sleep(s)
    monkeypatch.setattr(interleave.time, "sleep", sleep)
    try:
        with pytest.raises(KeyboardInterrupt):
            interleave.take_turns(procs, 0.01, 30)
        monkeypatch.undo()
        assert not any(interleave.stopped(p) for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def test_stopped_sees_a_stopped_process_and_a_gone_one():
    import os
    import signal
    p = _sleeper()
    try:
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not interleave.stopped(p) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert interleave.stopped(p)
        os.kill(p.pid, signal.SIGCONT)
    finally:
        p.kill()
        p.wait(timeout=10)
    assert not interleave.stopped(p)


def test_a_bad_slice_is_refused_and_no_processes_is_nothing():
    p = _sleeper()
    try:
        with pytest.raises(ValueError, match="slice 0 s"):
            interleave.take_turns([p], 0, 1)
        assert not interleave.stopped(p)
    finally:
        p.kill()
        p.wait(timeout=10)
    assert interleave.take_turns([], 0.01, 1) == []
