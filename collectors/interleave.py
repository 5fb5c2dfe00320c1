"""Processes that take turns on the CPUs in short slices: one runs, the others are stopped (SIGSTOP),
and every slice the next one is continued (SIGCONT) and the last stopped.

Why: this VM's speed moves on every scale from a tenth of a second to minutes, by ~10 % over the
shortest (analysis/MODEL.md, session 34), so two runs one after the other differ by as much, however
alike. Runs that take turns every few milliseconds see the same moments of the host and share its
noise (`rpcscope bench-interleave` measures by how much). A call in flight when its client is stopped
takes a slice longer: one call a slice, far above the p50.

Nothing is left stopped: whatever ends the turns (all exited, the deadline, an exception or an
interrupt), every process still alive is continued before take_turns returns or raises.
"""
import os
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
