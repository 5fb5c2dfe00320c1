"""`rpcscope bench event-cost`: what one recorded kernel event costs the thread that hits it, per kernel
tracer, side by side in one run.

Why: the probe correction's error grows with the probe effect it removes (analysis/probe.py). On
this VM a traced TCP call is ~2.5 times its untraced RTT, most of it perf's kernel events (about
1 µs each on the round-trip path); the correction is predicted within 1.5-2 % of that share, which
is as large as the model's 2 % goal. Whether another kernel tracer would shrink that share is a
measurement, not a guess: this is it.

A child process, pinned to one CPU and named COMM, makes N getppid() syscalls (glibc does not cache
getppid) and reports ns per call. Modes, interleaved over rounds so that the host's drift touches
all alike:

  untraced        nothing enabled
  perf            as collectors/perf.py records: `perf record -a -k mono -m MMAP_PAGES`, the
                  syscalls' enter and exit tracepoints filtered on the command name
  perf counting   the same events counted, not sampled (`perf stat`): the tracepoint and its
                  filter, without writing a sample
  ftrace          a tracefs instance of its own (trace_clock mono, the same filter), its ring
                  buffer written, read by nobody until the end
  ftrace paused   the same instance with its events enabled but tracing_on 0: what a collector
                  switched off between runs, not ended, costs the calls (its ns per event is per
                  event hit, at ftrace's events per call; a capture whose runs take turns
                  disables a paused instance's events instead, collectors/ftrace.py)

ns per event = (mode's median ns per call - untraced median) / events recorded per call; the
events recorded are counted back (perf report --stats; the instance's per-CPU entries and
overruns), so a filter that matched nothing shows as 0 events, not as a cheap tracer. LTTng-UST's
cost per user event is measured in situ by every capture (collectors/README.md).

Leaves nothing behind: the perf process ends with the child, the instance is removed (also on
an error or Ctrl-C).
"""
import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

from rpcscope.output import UserError, emit_json, table

from . import ftrace, perf

COMM = "rpcs-evcost"
EVENTS = ("syscalls:sys_enter_getppid", "syscalls:sys_exit_getppid")
MODES = ("untraced", "perf", "perf counting", "ftrace", "ftrace paused")
FTRACE_BUFFER_KB = 65536          # per CPU: holds ~1.3 M of these events, so nothing is overwritten

# The child: named COMM (the filters match it, nothing else), pinned, N getppid() calls.
CHILD = r"""
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(sys.argv[1].encode()), 0, 0, 0)   # PR_SET_NAME
os.sched_setaffinity(0, {int(sys.argv[3])})
n, f = int(sys.argv[2]), os.getppid
for _ in range(int(sys.argv[4])):        # warm-up (traced too)
    f()
t0 = time.perf_counter_ns()
for _ in range(n):
    f()
print((time.perf_counter_ns() - t0) / n)
"""

EPILOG = """examples:
  rpcscope bench event-cost                  200,000 calls, 5 rounds of each mode
  rpcscope bench event-cost --calls 50000 --rounds 3 --cpu 1 --json

Needs root, perf and tracefs (make bootstrap mounts it). Prints per mode the median ns per
getppid() call over the rounds, the events recorded per call, and ns per recorded event.
"""


def _filter():
    return perf.event_filter(EVENTS[0], procnames=(COMM,))


def _warmup(calls):
    return min(calls, 10_000)


def _child_argv(calls, cpu):
    return [sys.executable, "-c", CHILD, COMM, str(calls), str(cpu), str(_warmup(calls))]


def _ns_per_call(out):
    try:
        return float(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UserError(f"the syscall loop printed no timing: {out.strip()[-200:]!r}") from None


def _run_child(argv, timeout):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise UserError(f"`{' '.join(argv[:3])} ...` failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    return p.stdout


def _perf_record(calls, cpu, workdir, timeout):
    data = workdir / "perf.data"
    argv = perf.record_argv(data, EVENTS, (), procnames=(COMM,))     # the collector's own options
    out = _run_child(argv + ["--", *_child_argv(calls, cpu)], timeout)
    st = perf.stats(data)
    data.unlink(missing_ok=True)
    return _ns_per_call(out), sum(st["samples"].get(e, 0) for e in EVENTS), st["lost"]


def _perf_count(calls, cpu, timeout):
    argv = ["perf", "stat", "-a", "-x", ",", "-o", "/dev/stderr"]
    for e in EVENTS:
        argv += ["-e", e, "--filter", _filter()]
    p = subprocess.run(argv + ["--", *_child_argv(calls, cpu)], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise UserError(f"perf stat failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    counted = 0
    for line in p.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] in EVENTS and parts[0].strip().isdigit():
            counted += int(parts[0])
    return _ns_per_call(p.stdout), counted, 0


class FtraceInstance(ftrace.FtraceRecorder):
    """The collector's tracefs instance (ftrace.FtraceRecorder, trace_clock mono) with EVENTS filtered
    on the child's name, started at once; removed on close."""

    def __init__(self, buffer_kb=FTRACE_BUFFER_KB):
        super().__init__(EVENTS, (), procnames=(COMM,), buffer_kb=buffer_kb,
                         name=f"rpcscope-evcost-{os.getpid()}", record_tgid=False)
        self.start()

    def run(self, calls, cpu, timeout, record=True):
        """(ns per call, events written, 0); record False: with tracing_on left 0 (ftrace paused)."""
        if not record:
            ftrace._write(self.path / "trace", "")              # empties the ring: written() counts from here
            return _ns_per_call(_run_child(_child_argv(calls, cpu), timeout)), self.written(), 0
        self.enable()                                             # clears the buffer
        try:
            out = _run_child(_child_argv(calls, cpu), timeout)
        finally:
            self.disable()
        return _ns_per_call(out), self.written(), 0

    close = ftrace.FtraceRecorder.stop


def measure(calls=200_000, rounds=5, cpu=1, progress=None):
    """{"rows": [per mode], ...}: median ns per call over the rounds, events per call, ns per event."""
    if os.geteuid() != 0:
        raise UserError("needs root (system-wide perf, tracefs)")
    if not shutil.which("perf"):
        raise UserError("perf is not installed; `make bootstrap` installs it")
    for e in EVENTS:
        if not perf.tracepoint_available(e):
            raise UserError(f"tracepoint {e} is not in {perf.TRACEFS}/events; is tracefs mounted?")
    if not (1 <= calls <= 10_000_000) or not (1 <= rounds <= 100):
        raise UserError("give --calls 1..10000000 and --rounds 1..100")
    if cpu not in os.sched_getaffinity(0):
        raise UserError(f"CPU {cpu} is not one this process may use ({sorted(os.sched_getaffinity(0))})")
    timeout = 60 + calls * 20e-6
    res = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="rpcscope-evcost-") as tmp:
        inst = FtraceInstance()
        try:
            for r in range(rounds):
                for m in MODES:
                    if progress:
                        progress(r, rounds, m)
                    if m == "untraced":
                        got = (_ns_per_call(_run_child(_child_argv(calls, cpu), timeout)), 0, 0)
                    elif m == "perf":
                        got = _perf_record(calls, cpu, pathlib.Path(tmp), timeout)
                    elif m == "perf counting":
                        got = _perf_count(calls, cpu, timeout)
                    else:
                        got = inst.run(calls, cpu, timeout, record=m == "ftrace")
                    res[m].append(got)
        finally:
            inst.close()
    base = statistics.median(x[0] for x in res["untraced"])
    rows = []
    for m in MODES:
        ns = [x[0] for x in res[m]]
        ev = statistics.median(x[1] for x in res[m]) / (calls + _warmup(calls))
        med = statistics.median(ns)
        # A paused instance records nothing; its cost is per event hit, which ftrace's row counts.
        per = rows[MODES.index("ftrace")]["events_per_call"] if m == "ftrace paused" else ev
        rows.append({"mode": m, "ns_per_call": round(med, 1), "range_ns": f"{min(ns):.0f}-{max(ns):.0f}",
                     "events_per_call": round(ev, 3), "lost": sum(x[2] for x in res[m]),
                     "ns_per_event": round((med - base) / per, 1) if per else None})
    per = {r["mode"]: r["ns_per_event"] for r in rows}
    ratio = round(per["perf"] / per["ftrace"], 2) if per.get("perf") and per.get("ftrace") else None
    return {"calls": calls, "rounds": rounds, "cpu": cpu, "events": list(EVENTS), "filter": _filter(),
            "rows": rows, "perf_over_ftrace": ratio}


def cmd(args):
    def progress(r, n, mode):
        if not args.json and sys.stderr.isatty():
            print(f"\rround {r + 1}/{n}: {mode:<14}", end="", file=sys.stderr, flush=True)
    out = measure(args.calls, args.rounds, args.cpu, progress)
    if args.json:
        emit_json(out)
        return 0
    if sys.stderr.isatty():
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    print(f"event-cost: {out['calls']} getppid() calls a round, {out['rounds']} rounds per mode, on CPU {out['cpu']}; "
          f"events {', '.join(out['events'])} filtered on {out['filter']}")
    table(out["rows"], ["mode", "ns_per_call", "range_ns", "events_per_call", "lost", "ns_per_event"])
    print(f"perf's cost per recorded event over ftrace's: {out['perf_over_ftrace']}x "
          "(ns_per_event: the median call's extra time over untraced, per event recorded; ftrace paused: "
          "per event hit, its instance's events enabled with tracing_on 0, nothing recorded)")
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "event-cost", help="what one recorded kernel event costs, perf vs ftrace, side by side",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200_000, help="getppid() calls per round (default 200000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each mode, interleaved (default 5)")
    ap.add_argument("--cpu", type=int, default=1, help="CPU the syscall loop is pinned to (default 1)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.set_defaults(func=cmd)
    return ap
