"""Processes that take turns on the CPUs in short slices: one runs, the others are stopped (SIGSTOP),
and every slice the next one is continued (SIGCONT) and the last stopped.

Why: this VM's speed moves on every scale from a tenth of a second to minutes, by ~10 % over the
shortest (analysis/MODEL.md), so two runs one after the other differ by as much, however
alike. Runs that take turns every few milliseconds see the same moments of the host and share its
noise (`rpcscope bench interleave` measures by how much). A call in flight when its client is stopped
takes a slice longer: one call a slice, far above the p50.

Nothing is left stopped: whatever ends the turns (all exited, the deadline, an exception or an
interrupt), every process still alive is continued before take_turns returns or raises.

take_cooperative_turns is the capture's way (collectors/capture.py --turns): its processes are
rpc-clients that take a turn when told through a pipe and hand it back after a number of calls
(rpc-client --turn-fds, --turn-calls; rpc/turns.h), so no call is cut in two, and a hook around each
turn switches the tracer of a traced run on and off.
"""
import os
import select
import signal
import time


def _signal(proc, sig):
    """Send sig to proc unless it has been reaped (a process that exited meanwhile is no error)."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def take_turns(procs, slice_s, max_seconds):
    """Run procs (subprocess.Popen, each the program itself, not a shell that forks it) one at a time,
    slice_s seconds each in turn, until every one has exited or max_seconds have passed; then continue
    every one still alive and return how many turns each had. One left alone runs without turns."""
    if not procs:
        return []
    if not 0 < slice_s <= 1:
        raise ValueError(f"slice {slice_s:g} s: use more than 0 and at most 1 s")
    turns = [0] * len(procs)
    try:
        for p in procs[1:]:
            _signal(p, signal.SIGSTOP)
        current, end = 0, time.monotonic() + max_seconds
        turns[0] = 1
        while time.monotonic() < end:
            time.sleep(slice_s)
            live = [i for i, p in enumerate(procs) if p.poll() is None]
            if not live:
                break
            after = [i for i in live if i > current]
            nxt = after[0] if after else live[0]
            if nxt != current:
                _signal(procs[current], signal.SIGSTOP)
                _signal(procs[nxt], signal.SIGCONT)
                current = nxt
            turns[nxt] += 1
    finally:
        for p in procs:
            _signal(p, signal.SIGCONT)
    return turns


def stopped(proc):
    """Whether proc is stopped by a signal (state T in /proc/PID/stat); False once it has gone."""
    try:
        stat = open(f"/proc/{proc.pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


class TurnsError(Exception):
    """A cooperative turn that did not end: its client neither handed the turn back nor exited."""


class TurnTaker:
    """One process of take_cooperative_turns: the coordinator's ends of its two pipes (go: the
    coordinator writes a byte to start a turn; done: the process writes a byte to end it, and its end
    of the pipe closes when it exits), and what it had: turns, seconds in them. A taker with every=N
    has a turn in one pass of the round robin in N (those whose number is phase modulo N): its turns are
    N times as long (rpc-client --turn-calls), so it keeps the others' pace."""

    def __init__(self, name, every=1, phase=0):
        self.name = name
        self.every, self.phase = every, phase % every
        self.go_r, self.go_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        self.turns = 0
        self.seconds = 0.0
        self.finished = False

    def child_fds(self):
        """The fds the process inherits (Popen pass_fds) and names on its command line (--turn-fds IN,OUT)."""
        return (self.go_r, self.done_w)

    def after_spawn(self):
        """Close the process's ends in the coordinator, so that its exit ends the done pipe."""
        for fd in (self.go_r, self.done_w):
            os.close(fd)
        self.go_r = self.done_w = -1

    def close(self):
        for name in ("go_r", "go_w", "done_r", "done_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def take_cooperative_turns(takers, max_seconds, turn_timeout_s=30.0, on_start=None, on_end=None):
    """Give takers (TurnTaker, each a running rpc-client --turn-fds) turns one after another, round
    robin (a taker with every=N in one pass in N), until every one has exited; each turn's length is
    the process's own (rpc-client --turn-calls or --turn-us), and it ends between two calls, so no call
    is cut in two as SIGSTOP would.
    on_start(taker) runs just before a turn is given and on_end(taker) just after it ends (a tracer switched on and off
    around a traced client's turns). Raises TurnsError when a turn outlasts turn_timeout_s or the
    turns outlast max_seconds; the caller then stops the processes (their turn pipes stay open until
    TurnTaker.close)."""
    end = time.monotonic() + max_seconds
    live = list(takers)
    passes = 0
    while live:
        for t in list(live):
            if passes % t.every != t.phase:
                continue
            if time.monotonic() > end:
                raise TurnsError(f"the turns took more than {max_seconds:g} s; {len(live)} process(es) had not "
                                 f"finished ({', '.join(x.name for x in live)})")
            if on_start:
                on_start(t)
            t0 = time.monotonic()
            try:
                os.write(t.go_w, b"g")
                ready, _, _ = select.select([t.done_r], [], [], turn_timeout_s)
                data = os.read(t.done_r, 1) if ready else None
            except BrokenPipeError:           # it exited before this turn: its pipe's reader is gone
                data = b""
            finally:
                if on_end:
                    on_end(t)
            t.seconds += time.monotonic() - t0
            if data is None:
                raise TurnsError(f"{t.name} held its turn for more than {turn_timeout_s:g} s")
            t.turns += 1
            if not data:
                t.finished = True
                live.remove(t)
        passes += 1
    return takers
