"""collectors/interleave.py: processes take turns, and none is left stopped however the turns end;
real rpc-clients take cooperative turns (rpc-client --turn-fds) from take_cooperative_turns, against
real rpc-servers on 127.0.0.1. Real processes, signals and pipes; no root needed."""
import os
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


# ------------------------------------------------------------------ cooperative turns (rpc-client --turn-fds)

def _turn_client(rpc_bin, taker, port, size, calls, extra=()):
    argv = [str(rpc_bin("rpc-client", False)), "--server", "127.0.0.1", "--port", str(port), "--proc", "maxarg",
            "--size", str(size), "--calls", str(calls), "--warmup", "50", "--max-seconds", "60", "--json",
            "--turn-fds", ",".join(map(str, taker.child_fds())), "--turn-us", "2000", *extra]
    pr = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          pass_fds=taker.child_fds())
    taker.after_spawn()
    return pr


def test_real_clients_take_turns_between_calls_until_each_is_done(rpc_bin, rpc_server):
    import json
    servers = [rpc_server(transport="udp", executors=0, trace=False) for _ in range(2)]
    takers = [interleave.TurnTaker(f"client {i}") for i in range(2)]
    started = []
    try:
        procs = [_turn_client(rpc_bin, t, s.port, size, 3000, extra) for t, s, size, extra
                 in zip(takers, servers, (0, 4016), ((), ("--turn-calls", "100")))]
        started = [(t.name, i) for i, t in enumerate(takers)]
        begun, ended = [], []
        interleave.take_cooperative_turns(takers, 60, on_start=lambda t: begun.append(t.name),
                                          on_end=lambda t: ended.append(t.name))
        results = [json.loads(p.communicate(timeout=30)[0]) for p in procs]
    finally:
        for t in takers:
            t.close()
    assert started and all(p.returncode == 0 for p in procs)
    for t, res in zip(takers, results):
        assert t.finished and t.turns >= 3, (t.name, t.turns)
        assert res["calls"] == 3000 and not res["errors"]
        # every turn the coordinator gave was one the client began; it waited between all but its last
        assert res["turns"]["count"] == t.turns
        assert res["turns"]["waits_measured"] <= t.turns - 1
    assert results[0]["turns"]["turn_us"] == 2000 and results[0]["turns"]["turn_calls"] == 0
    # 1 + 50 + 3000 calls in turns of 100: 30 handed back after their 100th call, and a 31st of 51
    assert results[1]["turns"]["turn_calls"] == 100 and takers[1].turns == 31
    assert begun == ended                       # each turn's end hook ran, in the order the turns ran
    assert begun[:2] == ["client 0", "client 1"]


def test_a_taker_with_every_n_has_one_pass_in_n(rpc_bin, rpc_server):
    # Every pass of the round robin gives client 0 a turn; client 1 (every=3, phase 1) has passes 1, 4,
    # 7, ... only, in turns three times as long, so both end at about the same pass.
    import json
    servers = [rpc_server(transport="udp", executors=0, trace=False) for _ in range(2)]
    takers = [interleave.TurnTaker("often"), interleave.TurnTaker("seldom", every=3, phase=4)]
    try:
        procs = [_turn_client(rpc_bin, t, s.port, 0, 950, ("--turn-calls", str(n))) for t, s, n
                 in zip(takers, servers, (10, 30))]
        order = []
        interleave.take_cooperative_turns(takers, 60, on_start=lambda t: order.append(t.name))
        results = [json.loads(p.communicate(timeout=30)[0]) for p in procs]
    finally:
        for t in takers:
            t.close()
    assert all(p.returncode == 0 for p in procs) and all(r["calls"] == 950 for r in results)
    # 1 + 50 + 950 calls: 100 turns of 10 and a 101st that finds the client gone; 33 turns of 30 and a 34th
    assert [t.turns for t in takers] == [101, 35] or [t.turns for t in takers] == [101, 34]
    assert order[:5] == ["often", "often", "seldom", "often", "often"]
    passes_of_seldom = [order[:i].count("often") for i, n in enumerate(order) if n == "seldom"]
    assert passes_of_seldom[:3] == [2, 5, 8]      # the turn comes after often's turn in passes 1, 4, 7


def test_a_client_whose_coordinator_goes_away_says_so(rpc_bin, rpc_server):
    server = rpc_server(transport="udp", executors=0, trace=False)
    taker = interleave.TurnTaker("orphan")
    try:
        pr = _turn_client(rpc_bin, taker, server.port, 0, 100)
        os.close(taker.go_w)                 # the coordinator gone before giving a turn
        taker.go_w = -1
        _, err = pr.communicate(timeout=30)
    finally:
        taker.close()
    assert pr.returncode == 1
    assert "turn coordinator closed it" in err


@pytest.mark.parametrize("extra, message", [
    (["--turn-fds", "97,98"], "file descriptor 97 is not open"),
    (["--turn-fds", "3"], "is not IN,OUT"),
    (["--turn-fds", "0,1", "--threads", "2"], "one thread"),
    (["--turn-us", "50"], "--turn-us"),
])
def test_bad_turn_options_are_refused(rpc_bin, extra, message):
    pr = subprocess.run([str(rpc_bin("rpc-client", False)), "--calls", "1", *extra], capture_output=True, text=True,
                        timeout=30)
    assert pr.returncode == 2 and message in pr.stderr, pr.stderr


def test_a_turn_that_is_not_handed_back_ends_the_turns():
    taker = interleave.TurnTaker("silent")
    pr = subprocess.Popen(["sleep", "30"], pass_fds=taker.child_fds())
    taker.after_spawn()
    try:
        t0 = time.monotonic()
        with pytest.raises(interleave.TurnsError, match="silent held its turn for more than 0.3 s"):
            interleave.take_cooperative_turns([taker], 10, turn_timeout_s=0.3)
        assert time.monotonic() - t0 < 5
    finally:
        pr.kill()
        pr.wait()
        taker.close()
