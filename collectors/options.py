"""`rpcscope capture`'s parameters: their ranges, the checks that need no testbed (validate), the
checks before anything starts (preflight, check_disk), and the choices they imply (the kernel
collector, the kinds of run a case makes).
"""
import os
import pathlib
import shutil
import subprocess

from rpcscope import ROOT, packets, testbed, units
from rpcscope.output import UserError
from rpcscope.rundir import KERNEL_ONLY_RUNS, RunDir

from . import ftrace, idle, lttng, perf
from .rounds import EXTRA_SWEEP_SECONDS, MAX_EXTRA_ROUNDS

PROCS = ("null", "incr", "maxarg", "maxresult", "add", "sum", "concat", "echo", "courier", "courier_oneway", "fixedarg")
ASLR_SETTINGS = ("off", "on")   # --aslr: address-space layout randomization of the RPC processes
MAX_MSG = 256 << 10           # rpc-client/rpc-server --max-msg default
# Rounds per case: the median of more rounds moves less (see Capture.sweeps); a round of a case (its
# untraced and traced runs) costs ~1.2-1.8 s. Nine rather than seven: Measured and the probe points
# are medians of more rounds, for about a minute more a `make run` (the model's goals barely differ).
DEFAULT_REPEATS = 9
BASE_PORT = 7300
SERVER_SAFETY_S = 900         # a server left behind exits on its own after this long
# What any procedure's marshalling adds to its payload at most (sum's count, opaque lengths and padding):
# a bound for sizing trace buffers before the call's own arithmetic is known.
MARSHAL_MARGIN = 16
TRACE_BIN = ROOT / "build" / "trace" / "bin"
NOTRACE_BIN = ROOT / "build" / "notrace" / "bin"
CLOCK_BIN = ROOT / "build" / "clock" / "bin"      # make TRACE=clock: each mark one clock read (rpc/clockmark.h)
WAKECAL_SECONDS = 20           # rpc-wakecal's own bound (it takes ~0.5 s a role here)
CPUSPEED_SECONDS = 5           # rpc-cpuspeed's own bound (it takes ~0.07 s at full speed)
# Every client times this many slices of rpc-cpuspeed's loop before its warm-up and after its calls
# (rpc-client --pace-slices; ~5 ms each): the pace its CPU ran at, run by run (rounds.json "pace",
# repeats.<kind>_pace_ns). On a busy host both CPUs change pace together.
PACE_SLICES = 8
# --turns: every size and kind of a transport's round runs at once, taking turns of this many calls
# (collectors/interleave.py take_cooperative_turns). Calls, not a time: every run then makes its calls
# at one pace, so all of them span the whole round (with turns of 5 ms, UDP 0's runs were done in ~40
# turns, the first quarter of a round whose 24096 runs took ~200). 20 calls make a cycle through the
# 24 runs of a UDP round of ~50 ms, within which this host's speed holds (lag-1 correlation 0.4-0.65
# over 0.09 s).
TURN_CALLS = 20
# A traced run's tracefs instance has its events enabled only during the run's turns (collectors/ftrace.py
# events_off_while_paused), and enabling them takes ~20 ms here (the first syscall event's ~14 ms), so a
# traced run takes a turn in one pass in this many, of this many times --turn-calls: a fifth of the
# switching, at the others' pace.
TRACED_TURN_EVERY = 5
# The kernel-only runs of a round (capture --turns --kernel-only-runs), recorded as `rpcscope run --target
# reference` records a case, each kind into the run directory of its name: the untraced build; the traced
# build with its user tracepoints recording (the same kernel events: what differs between their steps is
# the user tracepoints' doing); the untraced build with every kernel event recorded twice (what differs is
# one more recording of the kernel events).
KERNEL_ONLY_KINDS = KERNEL_ONLY_RUNS
TURN_CALLS_RANGE = (1, 10000)
# `rpcscope run`'s rounds taking turns. Seven, not nine: every round counts (a median of the rounds'
# figures, each over its case's factor), and their noise is 0.4-0.8 % a size with nine; on a slow
# day nine take a `make run` past the 10 minutes it must keep to (UDP rounds of 27 s, TCP's of 16).
TURNS_REPEATS = 7
# With --turns a transport makes fewer rounds than asked where the capture's --deadline-seconds could
# not hold another one beside what must follow: this transport's finish, and this many rounds of every
# later transport (each as long as this one's median round) and its finish. Never fewer than this many
# rounds either: Measured is their median, and its noise half their spread. On a slow day seven rounds
# take the capture past a deadline of ~330 s (UDP rounds of 29 s, TCP's of 15).
MIN_TURNS_ROUNDS = 4


# ---------------------------------------------------------------- input

def proc_max_size(proc, max_msg=MAX_MSG):
    """rpc/procs.c's proc_max_size: the largest --size rpc-client accepts."""
    if proc in ("null", "incr", "add") or "." in proc:  # "iface.proc": the stub study's fixed signatures
        return 0
    if proc == "sum":
        return (max_msg - 4) // 4
    if proc == "concat":
        return max_msg - 16
    if proc == "fixedarg":
        return max_msg
    return max_msg - 8


def parse_sizes(text, option="--sizes"):
    """The option's payload sizes (rpcscope/units.py), one or more; a UserError for bad ones."""
    try:
        return units.parse_sizes(text, option)
    except units.UnitError as e:
        raise UserError(str(e)) from None


def parse_transports(text):
    ts = [t.strip() for t in str(text).split(",") if t.strip()]
    bad = [t for t in ts if t not in ("udp", "tcp")]
    if not ts or bad:
        raise UserError(f"--transport {text!r}: use udp, tcp or udp,tcp")
    return ts


def case_id(transport, proc, size):
    return f"{transport}-{proc}-{size}"


def fragments(size, transport):
    """Fragments a call of this payload sends at most (rpcscope.packets: 4016 body bytes per PDU)."""
    return 1 if transport == "tcp" else packets.frag_count(size + MARSHAL_MARGIN)


def validate(p):
    """Every check that needs no testbed: bad parameters fail here with the fix named."""
    if p["proc"] not in PROCS:
        raise UserError(f"unknown procedure {p['proc']!r}; use one of: {', '.join(PROCS)}")
    check_sizes(p["proc"], p["sizes"])
    if p["calls"] < 1 or p["calls"] > 10_000_000:
        raise UserError(f"--calls {p['calls']}: give 1 to 10000000 calls per size")
    if p["warmup"] < 0:
        raise UserError(f"--warmup {p['warmup']}: must be 0 or more")
    if p["wait"] == "recv" and "tcp" in p["transports"]:
        pass  # the client sleeps in recv; the server has no recv mode on TCP and uses select (recorded)
    if p.get("idle", "poll") not in idle.POLICIES:
        raise UserError(f"--idle {p.get('idle')!r}: use poll or os")
    if p.get("kernel_events", "lean") not in perf.KERNEL_EVENT_SETS:
        raise UserError(f"--kernel-events {p.get('kernel_events')!r}: use lean (the default) or full")
    if p.get("aslr", "off") not in ASLR_SETTINGS:
        raise UserError(f"--aslr {p.get('aslr')!r}: use off (one address layout for every run) or on")
    check_extra_sweep_seconds(p.get("extra_sweep_seconds", EXTRA_SWEEP_SECONDS))
    check_deadline_seconds(p.get("deadline_seconds"))
    if p.get("turns") and not TURN_CALLS_RANGE[0] <= p.get("turn_calls", TURN_CALLS) <= TURN_CALLS_RANGE[1]:
        raise UserError(f"--turn-calls {p.get('turn_calls')}: use {TURN_CALLS_RANGE[0]} to {TURN_CALLS_RANGE[1]} calls")
    if p.get("turns") and p.get("kernel") in ("perf", "lttng"):
        raise UserError(f"--turns takes --kernel ftrace (or auto, or none): a {p['kernel']} recorder cannot be "
                        f"switched off for the turns of the runs that are not traced")
    if p["placement"] == "split" and len(os.sched_getaffinity(0)) < 2:
        raise UserError("--placement split needs two CPUs (one per host); this machine offers "
                        f"{sorted(os.sched_getaffinity(0))}: use --placement same")


def check_extra_sweep_seconds(seconds):
    """Refuse an --extra-sweep-seconds outside 0..3600 (capture's validate, and `rpcscope run` before
    its testbed comes up)."""
    if not 0 <= seconds <= 3600:
        raise UserError(f"--extra-sweep-seconds {seconds:g}: use 0 (no extra sweeps) to 3600")


def check_deadline_seconds(seconds):
    """Refuse a --deadline-seconds outside 1..86400 (None: no deadline)."""
    if seconds is not None and not 1 <= seconds <= 86400:
        raise UserError(f"--deadline-seconds {seconds:g}: give 1 to 86400 seconds, or leave it out for no deadline")


def check_sizes(proc, sizes):
    """Refuse the sizes a procedure cannot carry (rpc/procs.c's proc_max_size), naming the largest."""
    limit = proc_max_size(proc)
    too_big = [s for s in sizes if s > limit]
    if too_big:
        what = "takes no payload: use --sizes 0" if limit == 0 else f"allows at most {limit} bytes"
        raise UserError(f"--sizes {','.join(map(str, too_big))}: procedure {proc} {what}")



# ---------------------------------------------------------------- preflight: before anything starts

def require_tool(name, fix):
    path = shutil.which(name)
    if not path:
        raise UserError(f"'{name}' was not found on PATH; {fix}")
    return path


def lttng_kernel_available():
    p = lttng.run_lttng(["list", "--kernel"], check=False)
    return p.returncode == 0


def preflight(p, testbed_state):
    if os.geteuid() != 0:
        raise UserError("capture runs processes in the testbed's network namespaces and records kernel events, "
                        "which needs root; run it as root (e.g. sudo .venv/bin/rpcscope capture ...)")
    if not testbed_state:
        raise UserError("the local testbed is down; start it with `rpcscope testbed up` and try again")
    problems = testbed.health(testbed_state)
    if problems:
        raise UserError(f"the local testbed is not healthy ({'; '.join(problems)}); "
                        f"repair it with `rpcscope testbed up`")
    idle.IdlePolicy(p.get("idle", "poll")).check()
    require_tool("ip", "install iproute2 (make bootstrap does)")
    require_tool("taskset", "install util-linux (make bootstrap does)")
    if p.get("aslr", "off") == "off":
        require_tool("setarch", "install util-linux (make bootstrap does), or use --aslr on")
    require_tool("lttng", "install lttng-tools (make bootstrap does)")
    require_tool("lttng-sessiond", "install lttng-tools (make bootstrap does)")
    require_tool("babeltrace2", "install babeltrace2 (make bootstrap does)")
    builds = ((TRACE_BIN, "make"), (NOTRACE_BIN, "make TRACE=0"))
    if p.get("clock_reads"):
        builds += ((CLOCK_BIN, "make TRACE=clock"),)
    for d, hint in builds:
        for prog in ("rpc-server", "rpc-client"):
            if not (d / prog).exists():
                raise UserError(f"{d / prog} is missing; build it with `{hint}`")
    kernel = choose_kernel_collector(p["kernel"])
    if kernel == "perf":
        require_tool("perf", "install linux-perf (make bootstrap does), or use --kernel none")
        if not (perf.TRACEFS / "events").is_dir():
            raise UserError(f"tracefs is not mounted at {perf.TRACEFS}; mount it with "
                            f"`mount -t tracefs nodev {perf.TRACEFS}` (make bootstrap does), or use --kernel none")
        probe = subprocess.run(["perf", "stat", "-x,", "-e", "sched:sched_switch", "--", "true"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            raise UserError(f"perf may not record tracepoints here ({probe.stderr.strip()[-200:]}); run as root "
                            f"with kernel.perf_event_paranoid <= 1, or use --kernel none")
    if kernel == "ftrace":
        ftrace.require()
    if p["kernel"] == "lttng" and not _lttng_modules_loaded():
        raise UserError("--kernel lttng: LTTng's kernel tracer (lttng-modules) is not loaded on this machine "
                        "(modprobe lttng-tracer; install lttng-modules-dkms); use --kernel perf or auto")


# Bytes on disk per call and per packet of a traced run's user and kernel traces, an upper bound of
# what was measured here (a 7-fragment UDP call: 19 KB of CTF; a null call: 3.8 KB).
TRACE_BYTES_PER_PACKET_CALL = 4000
# And of a clock-build run's two mark files, uncompressed until the round to keep is chosen (a null
# call: 46 marks of ~45 bytes; a 7-fragment UDP call: ~100).
CLOCK_BYTES_PER_PACKET_CALL = 2100


def disk_needed(p):
    """Bytes a capture holds at its peak: every round's traced run (and clock-build run) of every size
    of a transport (kept until the round to keep is chosen, at most repeats + MAX_EXTRA_ROUNDS), plus
    the kept traces of the transports before it."""
    per_packet_call = TRACE_BYTES_PER_PACKET_CALL + (CLOCK_BYTES_PER_PACKET_CALL if p.get("clock_reads") else 0)

    def one(transport, size):
        return (p["calls"] + p["warmup"]) * (fragments(size, transport) + 1) * per_packet_call
    rounds = p.get("repeats", 1) + (MAX_EXTRA_ROUNDS if p.get("repeats", 1) > 1 else 0)
    per_transport = {t: sum(one(t, s) for s in p["sizes"]) for t in p["transports"]}
    return max(rounds * v for v in per_transport.values()) + sum(per_transport.values())


def check_disk(p, out):
    """Refuse, before anything starts, a capture whose traces would not fit on out's file system."""
    where = pathlib.Path(out).absolute()
    while not where.exists():
        where = where.parent
    need, free = disk_needed(p), shutil.disk_usage(where).free
    if need > free:
        raise UserError(f"this capture may hold up to {need / 1e9:.1f} GB of traces at once (every round of "
                        f"every size of a transport, until the round to keep is chosen) and {where} has "
                        f"{free / 1e9:.1f} GB free; free some space, or use fewer --calls, --repeats or --sizes")


def _lttng_modules_loaded():
    try:
        return any(line.startswith("lttng_tracer ") for line in open("/proc/modules"))
    except OSError:
        return False


def choose_kernel_collector(kind):
    """auto: LTTng's kernel tracer where lttng-modules is loaded, else ftrace where tracefs has
    instances (a recorded event costs an eighth of perf's here: collectors/README.md), else perf."""
    if kind == "auto":
        if _lttng_modules_loaded():
            return "lttng"
        return "ftrace" if ftrace.available() else "perf"
    return kind



def in_situ(p, kernel):
    """Whether the analysis solves the probe effect from the cases' own runs (analysis/probe.py): with a
    calibration and a kernel collector, every case's traced minus untraced p50 is one point."""
    return p["calibration"] != "none" and kernel != "none"


def case_kinds(p, kernel):
    """The runs of each round of a case: untraced, the clock build (capture --clock-reads), user events
    only (capture --user-only-runs, with an in-situ calibration), traced. Why user-only runs are not made
    by default: the probe correction is solved from traced minus untraced alone, and a user-only run
    only records what a user event costs with no kernel event recorded; it would take a third of every
    round, time that goes to more rounds instead, so that more sizes have three or more rounds in one
    speed level of the host. Why the clock build runs in every round, not once after the rounds: its
    RTT then has a median in the kept round's speed level like the other kinds, which anchors the
    probe effect. Those runs keep a ring of marks; the step tables' marks come from one more run after
    the rounds (clock_marks_run)."""
    ust = in_situ(p, kernel) and p.get("user_only_runs")
    return ("untraced", *(("clock",) if p.get("clock_reads") else ()), *(("ust",) if ust else ()), "traced")



def prepare_out(out, replace):
    out = pathlib.Path(out)
    if out.exists():
        if not replace:
            raise UserError(f"{out} already exists; choose another --out, or pass --replace to overwrite that run")
        if any(out.iterdir()) and not RunDir(out).manifest_path.exists():
            raise UserError(f"{out} exists and is not a capture run (no manifest.json); refusing to replace it")
        shutil.rmtree(out)
    if not out.parent.exists():
        out.parent.mkdir(parents=True)
    return out

