"""`rpcscope capture` on the local testbed: user and kernel traces of chosen payload sizes.

For each (transport, size) case, in every round (Capture.sweeps: round r of
every size of a transport before round r + 1 of any):
  1. untraced: the TRACE=0 build's server and client (or the traced build with
     no session recording, --untraced stopped), warm-up then the measured calls;
  2. user events only (the in-situ probe calibration), then traced: an
     LTTng-UST session recording the rpc provider of exactly the case's two
     processes (lttng track --vpid), and for the traced run the kernel collector
     (ftrace, perf record -a -k mono with per-event filters, or LTTng's kernel
     tracer), the same warm-up and calls; discarded events and lost packets read back.
Then from the kept round (choose_sweep), per case: the traced run's kernel trace
converted to CTF, its clock class aligned with the UST trace's, events and bytes
counted, the other rounds' traces deleted, the manifest rewritten.

The two namespace hosts share one kernel and one filesystem: one lttng-sessiond
and one kernel collector serve both (the manifest says so). Processes started
here run in their own session (Ctrl-C reaches only rpcscope), are tracked by
pid and stopped by pid when the run ends, however it ends.
"""
import bisect
import contextlib
import datetime
import gzip
import json
import math
import os
import pathlib
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
import uuid

from rpcscope import ROOT
from rpcscope.interrupts import interruptible, uninterrupted
from rpcscope.output import UserError

from . import ftrace, idle, interleave, leftovers, lttng, perf

FORMAT = 1
PROCS = ("null", "incr", "maxarg", "maxresult", "add", "sum", "concat", "echo", "courier", "courier_oneway")
ASLR_SETTINGS = ("off", "on")   # --aslr: address-space layout randomization of the RPC processes
MAX_MSG = 256 << 10           # rpc-client/rpc-server --max-msg default
# Rounds per case: the median of more rounds moves less (see Capture.sweeps); a round of a case (its
# untraced and traced runs) costs ~1.2-1.8 s. Nine rather than seven: Measured and the probe points
# are medians of more rounds, for about a minute more a `make run` (the model's goals barely differ).
DEFAULT_REPEATS = 9
BASE_PORT = 7300
SERVER_SAFETY_S = 900         # a server left behind exits on its own after this long
UDP_FRAG_BODY = 4016          # body bytes per 4096-byte PDU
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
    return max_msg - 8


def parse_sizes(text):
    try:
        sizes = [int(s) for s in str(text).split(",") if s.strip() != ""]
    except ValueError:
        raise UserError(f"--sizes {text!r}: give byte counts separated by commas, e.g. 0,1392,4016,8032") from None
    if not sizes or any(s < 0 for s in sizes):
        raise UserError(f"--sizes {text!r}: give one or more non-negative byte counts, e.g. 0,4016")
    if len(set(sizes)) != len(sizes):
        raise UserError(f"--sizes {text!r}: a size is repeated")
    return sizes


def parse_transports(text):
    ts = [t.strip() for t in str(text).split(",") if t.strip()]
    bad = [t for t in ts if t not in ("udp", "tcp")]
    if not ts or bad:
        raise UserError(f"--transport {text!r}: use udp, tcp or udp,tcp")
    return ts


def case_id(transport, proc, size):
    return f"{transport}-{proc}-{size}"


def fragments(size, transport):
    return 1 if transport == "tcp" else max(1, -(-(size + 16) // UDP_FRAG_BODY))


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


def wait_ready(proc, ready, timeout_s=15.0):
    """Whether rpc-server (proc) wrote its --ready-file (it listens) within timeout_s; False as soon as it
    exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and not ready.exists():
        time.sleep(0.01)
    return ready.exists()


def aslr_prefix(setting):
    """The argv that starts rpc-server and rpc-client with the chosen address layout. off: setarch -R
    sets the process's personality ADDR_NO_RANDOMIZE, which exec keeps, so every run of a build has
    the same code, stack and heap addresses; a case's untraced, user-only and traced runs are separate
    processes, so a layout's effect on the round trip would otherwise land, run by run, in Measured and
    in the probe correction (`rpcscope bench-layout`: less spread between runs with the host steady,
    none while the host itself is bursty; collectors/README.md, step 3).
    on: the kernel's own policy (randomize_va_space)."""
    return ["setarch", "-R"] if setting == "off" else []


def rpc_bindir(traced, clock_out=None):
    """Where the programs of the build a run uses are: the clock build where it writes clock marks, else
    the traced or the untraced one."""
    return CLOCK_BIN if clock_out else TRACE_BIN if traced else NOTRACE_BIN


def clock_env(path, ring=False):
    """The argv prefix that has the clock build (make TRACE=clock) write its marks to path; ring: only
    the latest few (rpc/clockmark.h RPCS_CLOCKMARK_RING), as the rounds' clock runs do."""
    return ["env", f"RPCS_CLOCKMARK_OUT={path}", *(["RPCS_CLOCKMARK_RING=1"] if ring else [])] if path else []


def aslr_record(setting, local=True):
    """What the manifest says of the address layout: the setting, how it was applied, and the
    kernel's own policy for every other process (local testbed; on real hosts: None, not read)."""
    kernel = None
    if local:
        try:
            kernel = int(pathlib.Path("/proc/sys/kernel/randomize_va_space").read_text())
        except (OSError, ValueError):
            pass
    how = ("setarch -R (personality ADDR_NO_RANDOMIZE) on rpc-server and rpc-client" if setting == "off"
           else "the kernel's own policy (randomize_va_space)")
    return {"setting": setting, "how": how, "kernel_randomize_va_space": kernel}


def placement_cpus(placement):
    cpus = sorted(os.sched_getaffinity(0))
    if placement == "split":
        return {"client": cpus[0], "server": cpus[1]}
    return {"client": cpus[0], "server": cpus[0]}


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
    from rpcscope import testbed
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


# ---------------------------------------------------------------- facts about the machine

def _read(path, default=None):
    try:
        return pathlib.Path(path).read_text().strip()
    except OSError:
        return default


def cpu_model():
    for line in (_read("/proc/cpuinfo", "") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def clocksource():
    return _read("/sys/devices/system/clocksource/clocksource0/current_clocksource", "unknown")


def git_commit():
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "rpc", "tracepoints"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def tool_versions(kernel):
    out = {"lttng": lttng.version()}
    if kernel == "perf" or shutil.which("perf"):
        out["perf"] = perf.version()
    p = subprocess.run(["babeltrace2", "--version"], capture_output=True, text=True, timeout=10)
    m = re.search(r"(\d+\.\d+\.\d+)", p.stdout)
    out["babeltrace2"] = m.group(1) if m else p.stdout.strip()
    return out


# ---------------------------------------------------------------- counting

def bt_count(path, timeout=600):
    """(events, discarded events, discarded packets) of a CTF trace, read by babeltrace2's counter."""
    p = subprocess.run(["babeltrace2", str(path), "-c", "sink.utils.counter"], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise UserError(f"babeltrace2 cannot read {path}: {p.stderr.strip()[-300:]}")
    # The counter prints a block every 10000 events; the last block is the total.
    block = p.stdout.strip().split("\n\n")[-1]

    def field(name):
        m = re.search(rf"(\d+) {name}", block)
        return int(m.group(1)) if m else 0

    return field("Event messages?"), field("Discarded event messages?"), field("Discarded packet messages?")


def dir_bytes(path):
    path = pathlib.Path(path)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


# ---------------------------------------------------------------- processes

class Processes:
    """Every process this capture starts; stop_all() ends each one by its own pid."""

    def __init__(self):
        self.procs = []

    def spawn(self, argv, log_path=None, stdin=subprocess.DEVNULL, stdout=None, pass_fds=()):
        err = open(log_path, "ab") if log_path else subprocess.DEVNULL
        try:
            pr = subprocess.Popen(argv, stdin=stdin, stdout=stdout if stdout is not None else subprocess.DEVNULL,
                                  stderr=err, start_new_session=True, pass_fds=pass_fds)
        finally:
            if log_path:
                err.close()
        self.procs.append(pr)
        leftovers.note("processes", (pr.pid, os.path.basename(str(next((a for a in argv if "/rpc-" in str(a)),
                                                                         argv[0])))))
        return pr

    @staticmethod
    def stop(pr, sig=signal.SIGTERM, timeout=10):
        if pr.poll() is None:
            try:
                pr.send_signal(sig)
                pr.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait(timeout=10)
        leftovers.forget("processes", pr.pid)
        return pr.returncode

    def stop_all(self):
        for pr in reversed(self.procs):
            with contextlib.suppress(Exception):
                self.stop(pr, timeout=5)


class Sessiond:
    """A root lttng-sessiond: the one running, or one started here and stopped at the end (left as found)."""

    def __init__(self):
        self.started_pid = None

    @staticmethod
    def running():
        p = subprocess.run(["pgrep", "-u", "root", "-x", "lttng-sessiond"], capture_output=True, text=True)
        return [int(x) for x in p.stdout.split() if _alive(int(x))]   # a zombie is not a daemon

    def ensure(self):
        if self.running():
            return
        p = subprocess.run(["lttng-sessiond", "--daemonize"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise UserError(f"lttng-sessiond could not start: {p.stderr.strip()[-300:]}")
        # The daemon forks a run-as helper of the same name: keep the one whose parent is not a sessiond.
        pids = self.running()
        main = [pid for pid in pids if _ppid(pid) not in pids]
        self.started_pid = min(main or pids) if pids else None
        leftovers.note_sessiond(self.started_pid)

    def restore(self):
        pid = self.started_pid
        if not pid:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.05)
            else:
                print(f"capture: lttng-sessiond {pid} (started by this capture) did not stop on "
                      f"{sig.name}" + ("; killing it" if sig == signal.SIGTERM else ""), file=sys.stderr)
                continue
            break
        self.started_pid = None
        leftovers.note_sessiond(None)


def _ppid(pid):
    st = _read(f"/proc/{pid}/stat", "")
    try:
        return int(st.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    st = _read(f"/proc/{pid}/stat", "")
    return bool(st) and st.rsplit(")", 1)[1].split()[0] != "Z"


# ---------------------------------------------------------------- the capture

class Capture:
    def __init__(self, params, out_dir, testbed_state, progress=None, log=print, after_case=None):
        self.p = params
        self.after_case = after_case   # called as after_case(self, case) once a case is complete
        self.out = pathlib.Path(out_dir)
        self.tb = testbed_state
        self.progress = progress
        self.log = log
        self.procs = Processes()
        self.sessiond = Sessiond()
        self.sessions = []             # lttng sessions created and not yet destroyed
        self.ust_dirs = {}             # UST session -> its output directory
        self.perf = None
        self.case_perf = None          # the traced runs' perf (kernel_start) until kernel_release ends it
        self.case_ftrace = None        # or its ftrace instance (--kernel ftrace), alike
        self.calib_ftrace = None       # the loopback calibration's ftrace instance while it records
        self._perf_out = None          # where the running traced run's kernel.perf.data goes
        self.stopped_perf = []         # stopped perf recorders whose data is not yet converted or deleted
        self.hosts = {h["role"]: h for h in testbed_state["hosts"]}
        self.cpus = placement_cpus(params["placement"])
        self.kernel = choose_kernel_collector(params["kernel"])
        if params.get("turns") and params["kernel"] == "auto" and self.kernel == "lttng" and ftrace.available():
            self.kernel = "ftrace"           # an LTTng kernel session cannot pause for the untraced turns
        if params.get("turns") and self.kernel not in ("ftrace", "none"):
            raise UserError(f"--turns: the kernel collector here is {self.kernel}, which cannot be switched off for "
                            f"the turns of the runs that are not traced; mount tracefs (make bootstrap) for ftrace, "
                            f"or use --kernel none")
        self.tag = uuid.uuid4().hex[:8]
        self.manifest = None
        self.port = BASE_PORT
        self.last_ipis = None          # run_pair's IPIs per CPU role while its client ran (ipi_delta)

    # ------------------------------------------------------------ helpers
    def step(self, desc):
        if self.progress is not None:
            self.progress.set_description(desc)

    def advance(self):
        if self.progress is not None:
            self.progress.update(1)

    def ns(self, role):
        return self.hosts[role]["name"]

    def addr(self, role):
        return self.hosts[role]["address"]

    def devices(self):
        """The devices whose packets the kernel collector records: each host's own interface, and with
        --kernel-events full the bridge's side of its veth pair as well (the hop in between)."""
        devs = []
        for role in ("client", "server"):
            h = self.hosts[role]
            devs += [h["ifname"], h["peer_ifname"]] if self.kernel_events == "full" else [h["ifname"]]
        return devs

    @property
    def kernel_events(self):
        return self.p.get("kernel_events", "lean")

    def server_wait(self, transport):
        w = self.p["wait"]
        return "recv" if (w == "recv" and transport == "udp") else "select"

    def next_port(self):
        self.port += 1
        return self.port

    def write_manifest(self):
        tmp = self.out / "manifest.json.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
        tmp.replace(self.out / "manifest.json")

    # ------------------------------------------------------------ rpc processes
    def start_server(self, ns, bind, port, transport, cpu, traced, log_dir, tag, wait, clock_out=None,
                     clock_ring=False):
        bindir = rpc_bindir(traced, clock_out)
        ready = log_dir / f"server-{tag}.ready"
        ready.unlink(missing_ok=True)
        argv = ["ip", "netns", "exec", ns, *aslr_prefix(self.p.get("aslr", "off")), "taskset", "-c", str(cpu),
                *clock_env(clock_out, clock_ring), str(bindir / "rpc-server"),
                "--bind", bind, "--port", str(port), "--transport", transport,
                "--executors", str(self.p["executors"]), "--cpu", str(cpu), "--wait", wait,
                "--duration", str(SERVER_SAFETY_S), "--ready-file", str(ready),
                "--stats-json", str(log_dir / f"server-{tag}-stats.json")]
        for attempt in (1, 2):
            pr = self.procs.spawn(argv, log_dir / f"server-{tag}.log")
            if wait_ready(pr, ready):
                break
            self.procs.stop(pr)
            log = _read(log_dir / f"server-{tag}.log", "")[-400:]
            if "Address already in use" not in log:
                raise UserError(f"rpc-server did not start in {ns} on {bind}:{port}: {log}")
            # The port is held: by a leftover of a killed capture, which is removed, and the server tried again.
            removed = leftovers.clean() if attempt == 1 else []
            if not removed:
                raise UserError(f"rpc-server could not bind {bind}:{port} in {ns}: Address already in use, by a "
                                f"process that is no leftover of a capture (`ip netns exec {ns} ss -tulpn` names it); "
                                f"stop it and capture again")
            self.say_removed(f"rpc-server could not bind {bind}:{port} in {ns}: Address already in use, by a "
                             f"leftover of a killed capture; it was removed and the server started again", removed)
        ready.unlink(missing_ok=True)
        return pr

    def say_removed(self, why, removed):
        """Tell (stderr, the manifest's leftovers_removed) what of a killed capture was removed."""
        print(f"capture: removed the leftovers of a killed capture ({why}):", file=sys.stderr)
        for line in removed:
            print(f"  {line}", file=sys.stderr)
        if self.manifest is not None:
            self.manifest.setdefault("leftovers_removed", []).extend(removed)

    def client_argv(self, ns, server, port, transport, size, calls, warmup, cpu, traced, clock_out=None,
                    clock_ring=False, turns=None):
        """turns (take_cooperative_turns): (the TurnTaker, how many take turns); the client's time bound
        grows with them, for it runs one turn in that many."""
        bindir = rpc_bindir(traced, clock_out)
        max_s = max(30, int(calls * 0.005) + 30) * (turns[1] if turns else 1)
        turn_argv = ["--turn-fds", ",".join(map(str, turns[0].child_fds())),
                     "--turn-calls", str(self.p.get("turn_calls", TURN_CALLS))] if turns else []
        return ["ip", "netns", "exec", ns, *aslr_prefix(self.p.get("aslr", "off")), "taskset", "-c", str(cpu),
                *clock_env(clock_out, clock_ring), "sh", "-c", 'read _go && exec "$@"', "sh",
                str(bindir / "rpc-client"), "--server", server, "--port", str(port), "--transport", transport,
                "--proc", self.p["proc"], "--size", str(size), "--calls", str(calls), "--warmup", str(warmup),
                "--cpu", str(cpu), "--wait", self.p["wait"], "--max-seconds", str(max_s),
                "--pace-slices", str(PACE_SLICES), *turn_argv, "--json"], max_s + 60

    def spawn_client(self, argv, log_path, pass_fds=()):
        """Start the client held before exec: its pid (which exec keeps) is known before it runs."""
        pr = self.procs.spawn(argv, log_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=pass_fds)
        return pr

    def release_and_wait(self, pr, timeout, what):
        try:
            out, _ = pr.communicate(input=b"go\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.procs.stop(pr, signal.SIGKILL)
            raise UserError(f"{what}: rpc-client did not finish within {timeout}s") from None
        return self.client_result(pr, out, what)

    def client_result(self, pr, out, what):
        """The finished rpc-client's JSON (out: its stdout), checked: no errors, the --aslr asked for."""
        lines = out.decode(errors="replace").strip().splitlines()
        if pr.returncode != 0 or not lines or not lines[-1].startswith("{"):
            raise UserError(f"{what}: rpc-client failed (exit {pr.returncode}): {' '.join(lines[-3:])}")
        res = json.loads(lines[-1])
        if res.get("errors") or res.get("mismatches"):
            raise UserError(f"{what}: rpc-client reported {res.get('errors')} errors, "
                            f"{res.get('mismatches')} wrong results: {res.get('first_error')}")
        want = self.p.get("aslr", "off")
        if res.get("aslr") != want:
            raise UserError(f"{what}: rpc-client ran with ASLR {res.get('aslr')}, not {want} as --aslr asked "
                            f"(is setarch from util-linux on PATH? `make` rebuilds an rpc-client that reports it)")
        return res

    def run_pair(self, transport, size, calls, warmup, traced, log_dir, tag, trace_hook=None,
                 server_ns=None, client_ns=None, server_addr=None, cpus=None, clock_out=None):
        """One server and one client run; trace_hook(server_pid, client_pid) -> stop() is called
        once both pids are known and before the client runs. clock_out {"server", "client": path, "ring":
        bool}: the clock build (make TRACE=clock), each writing its clock marks there (ring: the latest few
        only, clock_env)."""
        cpus = cpus or self.cpus
        self.last_ipis = None
        sns = server_ns or self.ns("server")
        cns = client_ns or self.ns("client")
        saddr = server_addr or self.addr("server")
        port = self.next_port()
        srv = self.start_server(sns, saddr, port, transport, cpus["server"], traced, log_dir, tag,
                                self.server_wait(transport), clock_out=(clock_out or {}).get("server"),
                                clock_ring=(clock_out or {}).get("ring", False))
        stop_trace = None
        try:
            argv, timeout = self.client_argv(cns, saddr, port, transport, size, calls, warmup, cpus["client"], traced,
                                             clock_out=(clock_out or {}).get("client"),
                                             clock_ring=(clock_out or {}).get("ring", False))
            cl = self.spawn_client(argv, log_dir / f"client-{tag}.log")
            if trace_hook:
                stop_trace = trace_hook(srv.pid, cl.pid)
            irq0 = ipi_counts()
            res = self.release_and_wait(cl, timeout, f"{transport} {self.p['proc']} {size} ({tag})")
            self.last_ipis = ipi_delta(irq0, ipi_counts(), cpus)
            if stop_trace:
                st, stop_trace = stop_trace, None
                st()
        finally:
            if stop_trace:
                with contextlib.suppress(Exception):
                    stop_trace()
            self.procs.stop(srv)
        return res, {"server": srv.pid, "client": cl.pid}

    # ------------------------------------------------------------ tracing
    def ust_start(self, out_dir, calls, frags, pids):
        name = f"rpcs-capture-{self.tag}-{len(self.sessions)}-{int(time.time() * 1000) % 100000}"
        sub, num = lttng.ust_buffer_size(calls, frags)
        self.sessions.append(name)
        leftovers.note("lttng_sessions", name)
        self.ust_dirs[name] = out_dir
        for cmd in lttng.ust_session_commands(name, out_dir, sub, num, vpids=pids):
            lttng.run_lttng(cmd)
        lttng.run_lttng(["start", name])
        return name

    def ust_stop(self, name):
        lttng.stop_session(name)                # returns once every event recorded is on disk
        st = lttng.channel_stats(name).get(lttng.UST_CHANNEL, {"discarded_events": 0, "lost_packets": 0})
        # `lttng destroy` waits another half second for the session daemon to finish tearing the session
        # down (on this VM, whatever it held): two sessions a round, a minute and a half of a make run.
        # Not waiting is safe once the consumer daemon has closed the trace's files.
        lttng.run_lttng(["destroy", "--no-wait", name])
        self.sessions.remove(name)
        leftovers.forget("lttng_sessions", name)
        lttng.wait_files_closed(self.ust_dirs.pop(name))
        return st

    def trace_hook(self, ust_dir, calls, frags, got, kernel_dir=None):
        """A run_pair trace_hook: once both pids are known, a UST session recording into ust_dir (and,
        with kernel_dir, the kernel collector writing there); its stop() stops them and records the UST
        channel's losses in got["ust"], the kernel event set in got["kernel_events"] and what
        kernel_finish needs in got["kernel"]."""
        def hook(spid, cpid):
            shutil.rmtree(ust_dir, ignore_errors=True)
            name = self.ust_start(ust_dir, calls, frags, [spid, cpid])
            if kernel_dir is not None:
                got["kernel_events"] = self.kernel_start(kernel_dir, [spid, cpid])

            def stop():
                if kernel_dir is not None:
                    got["kernel"] = self.kernel_stop()
                got["ust"] = self.ust_stop(name)
            return stop
        return hook

    def kernel_event_set(self):
        """The perf or ftrace kernel collector's tracepoints for a traced run (perf.event_set)."""
        return perf.event_set(self.p["executors"], bool(self.tb["link"].get("rate_bit")),
                              available={e for e in perf.event_set(1, True, detail="full")
                                         if perf.tracepoint_available(e)},
                              detail=self.kernel_events)

    def kernel_start(self, out_dir, pids):
        """Start the kernel collector writing into out_dir (perf: out_dir/kernel.perf.data; ftrace:
        out_dir/kernel.ftrace, at kernel_stop; LTTng: out_dir/kernel)."""
        if self.kernel in ("perf", "ftrace"):
            # One recorder (a perf, or a tracefs instance) for traced runs that follow one another,
            # enabled around each, ended by kernel_release before the next run that is not traced (a
            # perf's tracepoints cost the calls even while disabled). In a case's rounds every traced
            # run is followed by an untraced one, so each has a recorder of its own.
            evs = self.kernel_event_set()
            if self.kernel == "perf":
                if self.case_perf is None:
                    work = self.out / ".perf"
                    self.case_perf = perf.PerfRecorder(work, work / "kernel.perf.data", evs, self.devices(),
                                                       persistent=True)
                    self.case_perf.start()
                rec = self.case_perf
            else:
                if self.case_ftrace is None:
                    self.case_ftrace = ftrace.FtraceRecorder(evs, self.devices())
                    self.case_ftrace.start()
                rec = self.case_ftrace
            rec.enable()
            self._perf_out = out_dir
            return evs
        if self.kernel == "lttng":
            name = f"rpcs-capture-k-{self.tag}-{len(self.sessions)}"
            evs = perf.event_set(self.p["executors"], False, detail=self.kernel_events)
            sysc = sorted({e.split("_", 2)[2] for e in evs if e.startswith("syscalls:")})
            self.sessions.append(name)
            leftovers.note("lttng_sessions", name)
            for cmd in lttng.lttng_kernel_commands(name, out_dir / "kernel", [e for e in evs if not e.startswith("syscalls:")],
                                                   sysc, self.devices(), perf.PROCNAMES):
                lttng.run_lttng(cmd)
            lttng.run_lttng(["start", name])
            self._ksession = name
            return evs
        return []

    def kernel_release(self):
        """End the traced runs' perf or tracefs instance before a run that is not traced (disabled since
        the last traced run, it holds nothing to keep), waiting until it is gone: its tracepoints cost
        the calls until then."""
        if self.case_perf:
            self.case_perf.kill()
            self.case_perf = None
            shutil.rmtree(self.out / ".perf", ignore_errors=True)
        if self.case_ftrace:
            self.case_ftrace.stop()
            self.case_ftrace = None

    def kernel_stop(self):
        """Stop the kernel collector; returns what kernel_finish needs: {"perf": the stopped recorder}
        or {"lost": LTTng's discarded events and lost packets}."""
        if self.kernel == "perf" and self.case_perf:
            self.case_perf.disable()
            rec = types.SimpleNamespace(data=self.case_perf.dump(self._perf_out / "kernel.perf.data"))
            self.stopped_perf.append(rec)           # its data is deleted by discard() or kernel_finish()
            return {"perf": rec}
        if self.kernel == "ftrace" and self.case_ftrace:
            self.case_ftrace.disable()
            return {"ftrace": self.case_ftrace.dump(self._perf_out / "kernel.ftrace")}
        if self.kernel == "lttng":
            name = self._ksession
            lttng.run_lttng(["stop", name])
            st = lttng.channel_stats(name).get(lttng.KERNEL_CHANNEL, {})
            lttng.run_lttng(["destroy", name])
            self.sessions.remove(name)
            leftovers.forget("lttng_sessions", name)
            return {"lost": st.get("discarded_events", 0) + st.get("lost_packets", 0)}
        return {}

    def kernel_finish(self, out_dir, ust_dir, stopped):
        """Convert into out_dir/kernel, align clocks, count; returns (events, lost, per-event counts).
        stopped: kernel_stop()'s result."""
        kdir = out_dir / "kernel"
        if self.kernel in ("perf", "ftrace"):
            if self.kernel == "perf":
                raw = stopped["perf"].data                   # kernel.perf.data
                st = perf.stats(raw)
                samples, lost = st["samples"], st["lost"]
                perf.convert_to_ctf(raw, kdir)
            else:
                raw = stopped["ftrace"]                      # the ring's dump, a directory
                shutil.rmtree(kdir, ignore_errors=True)
                samples, lost = ftrace.convert_to_ctf(raw, kdir)
            clock = perf.ust_clock(ust_dir)
            if clock:
                perf.align_clock(kdir, clock)
            if self.p["keep_perf_data"]:
                if raw.parent != out_dir:
                    raw.replace(out_dir / raw.name)
            elif raw.is_dir():
                shutil.rmtree(raw, ignore_errors=True)
            else:
                raw.unlink(missing_ok=True)
            events, _, _ = bt_count(kdir)
            return events, lost, samples
        if self.kernel == "lttng":
            events, _, _ = bt_count(kdir)
            return events, stopped.get("lost", 0), {}
        return 0, 0, {}

    # ------------------------------------------------------------ rounds, in sweeps over a transport's cases
    def sweeps(self, transport, cases, kinds, n):
        """n rounds of runs of the given kinds ("untraced", "clock": the clock build, "ust": user events
        only, "traced": user and kernel events) of every case of a transport into cases/ID/repeat-R/, in
        sweeps: round r of every case (in size order) before round r + 1 of any. Returns ({case id: {kind: [run]}}, the
        order the runs ran in per case, {case id: (its kept round, the rounds that agree with it)}, the
        sweeps' record), a run being {"res", "pids", "got", "dir", "ust"}.

        Why rounds: on this VM one run's p50 moves by up to 25 % from the next identical one (its calls
        uniformly slower or faster), so a single run cannot stand for the configuration. Why each round
        runs every kind once (untraced and traced; user-only too with --user-only-runs): this VM's speed
        switches between levels ~20-30 % apart that hold for seconds to minutes (a TCP case's untraced
        rounds 25.4, 25.2, 25.3, 18.0, 18.1 us); a level touches the round trip, not a CPU-bound loop (a
        fixed Python loop takes 0.19 s in either level while the null call goes from 22.0 to 26.5 us).
        Why sweeps: the model fits each step's unit cost over the sizes of a transport, so every size
        must be measured in the same level. Were each case to run its rounds before the next case, a
        switch between cases would put sizes in different levels that no unit costs fit (one size off by
        25 % while its neighbours lie within 1.4 %). A sweep of a
        transport's sizes takes ~10-15 s, so most sweeps lie in one level; the kept round is the one
        most other rounds agree with (choose_sweep), and up to MAX_EXTRA_ROUNDS more sweeps are made
        while fewer than SWEEP_SETTLE_ROUNDS agree (if none settles, each size keeps a whole round in
        one level of the host's speed: level_rounds). A perf's tracepoints cost the calls even while its
        events are disabled (the null call's untraced p50 is 8 % higher with a
        disabled perf attached, measured on this VM), so the kernel collector is ended before every
        run that is not traced (kernel_release) and started again for the next traced one: about
        1.5 s a round with perf, 0.2 s with ftrace."""
        calls, warmup = self.p["calls"], self.p["warmup"]
        runs = {c["id"]: {k: [] for k in kinds} for c in cases}
        order = {c["id"]: [] for c in cases}

        def one(case, r, kind, rounds):
            cdir = self.out / case["dir"]
            rdir = cdir / f"repeat-{r}"
            rdir.mkdir(parents=True, exist_ok=True)
            if kind != "traced":
                self.kernel_release()
            self.step(f"{case['id']}: {kind}, round {r + 1}/{rounds}")
            got, hook, ust, clock_out = {}, None, rdir / f"ust-{kind}", None
            if kind == "clock":      # the rounds' clock runs keep a ring of marks: the anchor's (clock_env)
                clock_out = {**{role: rdir / f"clock-{role}.txt" for role in ("client", "server")}, "ring": True}
            elif kind != "untraced":
                hook = self.trace_hook(ust, calls + warmup, fragments(case["size"], transport), got,
                                       kernel_dir=rdir if kind == "traced" else None)
            traced = kind in ("ust", "traced") or (kind == "untraced" and self.p["untraced"] == "stopped")
            res, pids = self.run_pair(transport, case["size"], calls, warmup, traced, rdir, f"{kind}-{r}", hook,
                                      clock_out=clock_out)
            if kind == "ust":
                shutil.rmtree(ust, ignore_errors=True)   # only its p50 is used: no disk held for it
            sleeps = sleeps_per_call(res, rdir / f"server-{kind}-{r}-stats.json", self.last_ipis, calls + warmup)
            runs[case["id"]][kind].append({"res": res, "pids": pids, "got": got, "dir": rdir, "ust": ust,
                                           "sleeps": sleeps})
            order[case["id"]].append(f"{kind}-{r}")
            self.advance()

        def sweep(r, rounds):
            t0 = time.monotonic()
            if self.p.get("turns"):
                self.turns_round(transport, cases, kinds, r, rounds, runs, order)
            else:
                for case in cases:
                    for kind in kinds:
                        one(case, r, kind, rounds)
            seconds.append(round(time.monotonic() - t0, 1))
            self.kernel_release()         # the check runs with no tracer attached, as untraced runs do
            self.cpu_speed_check(f"{transport} sweep {r + 1}")

        seconds = []
        if self.p.get("turns"):
            ended = "turns"
            for r in range(n):
                sweep(r, n)
                left = self.seconds_left(transport, MIN_TURNS_ROUNDS, seconds)
                if MIN_TURNS_ROUNDS <= r + 1 < n and left is not None and left < statistics.median(seconds):
                    ended = "capture deadline"
                    if self.progress is not None:
                        self.progress.total -= (n - r - 1) * len(kinds) * len(cases)
                    break
            return (runs, order, *self.turns_record(transport, cases, runs, len(seconds), seconds, ended))
        for r in range(n):
            sweep(r, n)
        p50s = _p50s(runs)
        kept, agreeing, dist = choose_sweep(p50s)
        r = n
        budget = self.p.get("extra_sweep_seconds", EXTRA_SWEEP_SECONDS)
        while (ended := sweeps_end(agreeing, r, n, seconds, budget, self.seconds_left(transport, n, seconds))) is None:
            if self.progress is not None:
                self.progress.total += len(kinds) * len(cases)
            sweep(r, r + 1)
            r += 1
            p50s = _p50s(runs)
            kept, agreeing, dist = choose_sweep(p50s)
        settled = sweeps_settled(agreeing, r)     # every sweep (one at least) ended its kernel collector
        if settled:
            level, by_case = None, {c["id"]: settled_rounds(p50s, c["id"], kept, agreeing) for c in cases}
        else:
            level, by_case = level_rounds(p50s, [c["id"] for c in cases])
        record = {"rounds": n, "extra_rounds": r - n, "kept_round": kept, "agreeing_rounds": agreeing,
                  "settled": settled, "agree_pct": SWEEP_AGREE_PCT,
                  "kept": "the sweep most rounds agree with" if settled else
                  f"each size's most central whole round in the host's {('faster', 'slower')[level]} level",
                  "level": None if settled else ("faster", "slower")[level], "level_gap_pct": 100 * LEVEL_GAP,
                  "kept_by_case": {cid: k for cid, (k, _) in by_case.items()},
                  "kept_straddle_pct": {cid: round(straddle_pct({x: v for x, v in p50s.items() if x[0] == cid})[k], 2)
                                        for cid, (k, _) in by_case.items()},
                  "distance_pct": [[round(x, 2) for x in row] for row in dist], "seconds": seconds,
                  "ended": ended, "extra_sweep_seconds": budget,
                  "deadline_seconds": self.p.get("deadline_seconds"),
                  "cases": [c["id"] for c in cases]}
        return runs, order, by_case, record

    def turns_round(self, transport, cases, kinds, r, rounds, runs, order):
        """Round r of every case and kind of a transport at once (--turns): a server and a held client
        each, the traced ones' UST sessions and tracefs instances (one per case, paused), then turns
        of --turn-calls each, round robin (collectors/interleave.py take_cooperative_turns), with the
        case's instance recording only while its traced client has the turn. Appends each run to
        runs[case id][kind] as one() does, with its turns.

        Why: this VM's speed moves by ~10 % within a tenth of a second (analysis/MODEL.md, session
        34), so runs one after the other differ by as much; runs that take turns every few ms see the
        same moments of the host. The traced run's step costs, the untraced run's Measured and every
        size the model is fitted over then come from the same host (bench-interleave: the ln ratio of
        two identical runs spread 0.3-0.6 % taking turns, 4-8 % one after the other). The IPIs of a
        run are counted over its turns (one read of /proc/interrupts, ~80 us, at each turn's end)."""
        calls, warmup = self.p["calls"], self.p["warmup"]
        total = calls + warmup
        members = [{"case": c, "kind": k} for c in cases for k in kinds]
        self.step(f"{transport}: round {r + 1}/{rounds}, {len(members)} runs taking turns")
        evs = self.kernel_event_set() if self.kernel == "ftrace" and "traced" in kinds else []
        try:
            for m in members:
                case, kind = m["case"], m["kind"]
                rdir = m["dir"] = self.out / case["dir"] / f"repeat-{r}"
                rdir.mkdir(parents=True, exist_ok=True)
                tag = m["tag"] = f"{kind}-{r}"
                clock_out = ({**{role: rdir / f"clock-{role}.txt" for role in ("client", "server")}, "ring": True}
                             if kind == "clock" else {})
                traced = kind in ("ust", "traced") or (kind == "untraced" and self.p["untraced"] == "stopped")
                port = self.next_port()
                m["srv"] = self.start_server(self.ns("server"), self.addr("server"), port, transport, self.cpus["server"],
                                             traced, rdir, tag, self.server_wait(transport),
                                             clock_out=clock_out.get("server"), clock_ring=True)
                m["taker"] = interleave.TurnTaker(f"{case['id']} {kind}")
                argv, m["timeout"] = self.client_argv(self.ns("client"), self.addr("server"), port, transport,
                                                      case["size"], calls, warmup, self.cpus["client"], traced,
                                                      clock_out=clock_out.get("client"), clock_ring=True,
                                                      turns=(m["taker"], len(members)))
                m["out"] = rdir / f"client-{tag}.json"
                with open(m["out"], "wb") as out:      # a file, not a pipe: an exiting client never blocks
                    m["cl"] = self.procs.spawn(argv, rdir / f"client-{tag}.log", stdin=subprocess.PIPE,
                                               stdout=out, pass_fds=m["taker"].child_fds())
                m["taker"].after_spawn()
                m["got"], m["ust"], m["ipis"] = {}, rdir / f"ust-{kind}", {}
                if kind in ("ust", "traced"):
                    shutil.rmtree(m["ust"], ignore_errors=True)
                    m["session"] = self.ust_start(m["ust"], total, fragments(case["size"], transport),
                                                  [m["srv"].pid, m["cl"].pid])
                if kind == "traced" and evs:
                    m["rec"] = ftrace.FtraceRecorder(evs, self.devices(),
                                                     buffer_kb=turn_buffer_kb(total, fragments(case["size"], transport)))
                    m["rec"].start()
                    m["got"]["kernel_events"] = evs
            for m in members:
                try:
                    m["cl"].stdin.write(b"go\n")
                    m["cl"].stdin.close()
                except BrokenPipeError:
                    log = _read(m["dir"] / f"client-{m['tag']}.log", "")[-400:]
                    raise UserError(f"{m['case']['id']} {m['kind']}: rpc-client exited before its first turn: "
                                    f"{log}") from None

            def on_start(taker):
                if by_taker[taker].get("rec"):
                    by_taker[taker]["rec"].resume()

            def on_end(taker):
                m = by_taker[taker]
                if m.get("rec"):
                    m["rec"].pause()
                counts = ipi_counts()          # this turn's end, and the next one's start
                for role, n_ipi in (ipi_delta(last[0], counts, self.cpus) or {}).items():
                    m["ipis"][role] = m["ipis"].get(role, 0) + n_ipi
                last[0] = counts

            by_taker = {m["taker"]: m for m in members}
            last = [ipi_counts()]
            try:
                interleave.take_cooperative_turns([m["taker"] for m in members], max(m["timeout"] for m in members),
                                                  on_start=on_start, on_end=on_end)
            except interleave.TurnsError as e:
                raise UserError(f"{transport} round {r + 1}: {e}; the clients' logs are in "
                                f"{self.out}/cases/*/repeat-{r}/") from None
            for m in members:
                what = f"{transport} {self.p['proc']} {m['case']['size']} ({m['tag']}, taking turns)"
                try:
                    m["cl"].wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise UserError(f"{what}: rpc-client did not exit after its last turn") from None
                m["res"] = self.client_result(m["cl"], m["out"].read_bytes(), what)
                m["out"].unlink()
                if m.get("session"):
                    m["got"]["ust"] = self.ust_stop(m.pop("session"))
                if m.get("rec"):
                    m["got"]["kernel"] = {"ftrace": m["rec"].dump(m["dir"] / "kernel.ftrace")}
                    m.pop("rec").stop()
        finally:
            for m in members:
                if m.get("cl"):
                    self.procs.stop(m["cl"])
                if m.get("srv"):
                    self.procs.stop(m["srv"])       # its --stats-json is written as it exits
                if m.get("taker"):
                    m["taker"].close()
                if m.get("rec"):
                    m["rec"].stop()
                if m.get("session"):
                    with contextlib.suppress(Exception):
                        self.ust_stop(m["session"])
        for m in members:
            cid, kind, res = m["case"]["id"], m["kind"], m["res"]
            if kind == "ust":
                shutil.rmtree(m["ust"], ignore_errors=True)   # only its p50 is used: no disk held for it
            turns = res.get("turns") or {}
            sleeps = sleeps_per_call(res, m["dir"] / f"server-{m['tag']}-stats.json", m["ipis"] or None, total,
                                     turn_waits=(turns.get("waits_measured", 0), turns.get("count", 0)))
            runs[cid][kind].append({"res": res, "pids": {"server": m["srv"].pid, "client": m["cl"].pid},
                                    "got": m["got"], "dir": m["dir"], "ust": m["ust"], "sleeps": sleeps,
                                    "turns": {"count": m["taker"].turns, "seconds": round(m["taker"].seconds, 3)}})
            order[cid].append(m["tag"])
            self.advance()

    def turns_record(self, transport, cases, runs, n, seconds, ended="turns"):
        """({case id: (the kept round, every round)}, the sweeps' record) of a capture whose runs took
        turns (--turns), n rounds made (`ended`: "turns", or "capture deadline" where the deadline cut the
        rounds asked for, MIN_TURNS_ROUNDS): the kept round (turns_kept_round: its kinds stand to each
        other, and its sizes to each other, as in most rounds) gives every case its traces; every round is in its "level", each round's p50s divided by the case's
        factor in the round (case_factors; analysis/run.py level_rounds_p50s). No extra sweeps: a round's kinds and
        sizes share the host's moments, so the rounds need not agree with one another."""
        p50s = _p50s(runs, clock=True)     # the kinds analysis/run.py case_round_factors takes
        kept = turns_kept_round(p50s)
        every = list(range(n))
        by_case = {c["id"]: (kept, every) for c in cases}
        speed = round_speeds(p50s)
        turns = [x["turns"]["count"] for v in runs.values() for k in v.values() for x in k]
        record = {"rounds": n, "extra_rounds": 0, "kept_round": kept, "agreeing_rounds": every,
                  "settled": True, "agree_pct": SWEEP_AGREE_PCT,
                  "kept": "one round for every size: the one whose kinds stand to each other, and whose sizes to "
                          "each other, as in most rounds (the sizes and kinds of a round took turns)",
                  "level": None, "kept_by_case": {cid: kept for cid in by_case},
                  "kept_straddle_pct": {}, "distance_pct": [], "seconds": seconds, "ended": ended,
                  "rounds_asked": self.p.get("repeats", 1),
                  "extra_sweep_seconds": 0, "deadline_seconds": self.p.get("deadline_seconds"),
                  "turns": {"turn_calls": self.p.get("turn_calls", TURN_CALLS), "runs_per_round": len(turns) // max(1, n),
                            "turns_per_run_median": statistics.median(turns) if turns else None,
                            "probe_effect_spread_pct": turns_spread_pct(p50s), "round_speed": speed},
                  "cases": [c["id"] for c in cases]}
        return by_case, record

    def seconds_left(self, transport, repeats, seconds):
        """Of the capture's --deadline-seconds (None: no deadline), the seconds left for more sweeps of
        `transport` (`seconds`: its sweeps so far) once what must still follow them is set aside: this
        transport's cases' finish, and every later transport's `repeats` sweeps (each estimated as this
        one's median sweep) and finish (FINISH_SECONDS_PER_CASE a case)."""
        deadline = self.p.get("deadline_seconds")
        if deadline is None:
            return None
        transports = self.p["transports"]
        later = len(transports) - transports.index(transport) - 1
        cases = len(self.p["sizes"])
        reserve = (1 + later) * cases * FINISH_SECONDS_PER_CASE + later * repeats * statistics.median(seconds)
        return deadline - (time.monotonic() - self.started) - reserve

    def keep_run(self, run, d):
        """The kept traced run's traces move to d/ust (and d/kernel, converted). Returns its kernel
        counts (events, lost, per-event counts)."""
        ust = d / "ust"
        shutil.rmtree(ust, ignore_errors=True)
        if run["ust"].is_dir():
            run["ust"].replace(ust)
        kernel = (0, 0, {})
        if "kernel" in run["got"]:
            if (run["dir"] / "kernel").is_dir():          # LTTng's kernel session output
                shutil.rmtree(d / "kernel", ignore_errors=True)
                (run["dir"] / "kernel").replace(d / "kernel")
            kernel = self.kernel_finish(d, ust, run["got"]["kernel"])
        return kernel

    def discard(self, d):
        """Delete the rounds' leftovers under d (traces not kept, perf data, logs of good runs)."""
        for rec in self.stopped_perf:
            if rec.data.parent.parent == d and rec.data.parent.name.startswith("repeat-"):
                rec.data.unlink(missing_ok=True)
        self.stopped_perf = [r for r in self.stopped_perf if r.data.exists()]
        for rdir in (*d.glob("repeat-*"), d / "clock-marks"):
            if not rdir.is_dir():
                continue
            for f in rdir.glob("*.log"):
                if f.stat().st_size:
                    f.replace(d / f.name)
            shutil.rmtree(rdir, ignore_errors=True)

    # ------------------------------------------------------------ calibration
    def calibrate(self):
        """Per host, on the host's loopback, client and server on the host's CPU: the cost of one user
        event (traced vs not, divided by events per call) and of one kernel event of each kind."""
        out = {}
        calls, warmup = self.p["calibration_calls"], max(100, self.p["calibration_calls"] // 10)
        cdir = self.out / "calibration"
        cdir.mkdir(exist_ok=True)
        for role in ("client", "server"):
            host = self.ns(role)
            cpu = self.cpus[role]
            cpus = {"client": cpu, "server": cpu}
            kw = dict(server_ns=host, client_ns=host, server_addr="127.0.0.1", cpus=cpus)
            total = calls + warmup

            def run(tag, hook=None):
                res, _ = self.run_pair("udp", 0, calls, warmup, True, cdir, f"{host}-{tag}", hook, **kw)
                return res["rtt_ns"]["p50"]

            self.step(f"calibration {host}: baseline")
            base = [run("base")]
            udir = cdir / f"{host}-ust"
            self.step(f"calibration {host}: user events")
            p50_ust = run("ust", self.trace_hook(udir, total, 1, {}))
            n_ust, _, _ = bt_count(udir)
            shutil.rmtree(udir, ignore_errors=True)
            result = {"ust_event_ns": round((p50_ust - base[0]) / max(1e-9, n_ust / total), 1),
                      "ust_events_per_call": round(n_ust / total, 2), "kernel_event_ns": {},
                      "kernel_events_per_call": {}, "baseline_p50_ns": base[0], "calls": calls}
            if self.kernel in ("perf", "ftrace") and self.p["calibration"] != "none":
                avail = [e for e in perf.event_set(self.p["executors"], detail=self.kernel_events)
                         if perf.tracepoint_available(e)]
                groups = [[e] for e in avail] if self.p["calibration"] == "full" else [avail]
                for evs in groups:
                    label = evs[0] if len(evs) == 1 else "all"
                    data = cdir / f"{host}-{label.replace(':', '_')}.perf.data"
                    written = []

                    def k_hook(spid, cpid, evs=evs, data=data, written=written):
                        if self.kernel == "ftrace":
                            rec = self.calib_ftrace = ftrace.FtraceRecorder(evs, ["lo"], buffer_kb=16384)
                            rec.start()
                            rec.enable()

                            def stop():
                                rec.disable()
                                written.append(rec.written())
                                rec.stop()
                            return stop
                        rec = perf.PerfRecorder(cdir, data, evs, ["lo"])
                        self.perf = rec
                        rec.start()
                        return rec.stop

                    self.step(f"calibration {host}: kernel {label}")
                    p50 = run(label.replace(":", "_"), k_hook)
                    self.perf = self.calib_ftrace = None
                    n = written[0] if written else sum(perf.stats(data)["samples"].values())
                    data.unlink(missing_ok=True)
                    base.append(run("base"))  # the baseline drifts: measure it around each
                    b = sorted(base)[len(base) // 2]
                    per_call = n / total
                    result["kernel_events_per_call"][label] = round(per_call, 2)
                    result["kernel_event_ns"][label] = round((p50 - b) / per_call, 1) if per_call >= 0.5 else None
                result["baseline_p50_ns"] = sorted(base)[len(base) // 2]
            out[host] = result
            self.advance()
        shutil.rmtree(cdir, ignore_errors=True)
        return out

    def wake_calibration(self):
        """What a wake-up costs each role's CPU (rpc-wakecal, rpc/wakecal.h), for the model's other-path
        terms (analysis/wakeup.py): {role: rpc-wakecal's JSON with the reader on that role's CPU and the
        sender on the other's}, in the server's namespace, under the capture's idle policy. Half a second
        a role. A role it could not run for holds {"error": why}: the model then has no other-path
        terms, and the capture goes on."""
        out = {}
        if self.cpus["client"] == self.cpus["server"]:
            return {"skipped": "client and server share a CPU: a wake-up within one CPU takes no interrupt"}
        binary = NOTRACE_BIN / "rpc-wakecal"
        for role, other in (("server", "client"), ("client", "server")):
            self.step(f"wake-up calibration: reader on the {role}'s CPU {self.cpus[role]}")
            argv = ["ip", "netns", "exec", self.ns("server"), str(binary), "--sender-cpu", str(self.cpus[other]),
                    "--receiver-cpu", str(self.cpus[role]), "--max-seconds", str(WAKECAL_SECONDS), "--json"]
            try:
                out[role] = tool_json(argv, WAKECAL_SECONDS + 10)
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                out[role] = {"error": f"{binary.name}: {e} (run `make` for the binary; the model gets no "
                                      f"other-path terms)"}
        return out

    def cpu_speed_check(self, when):
        """How long the testbed's CPUs took for a fixed piece of work, slice after slice (rpc-cpuspeed,
        rpc/cpuspeed.h), appended to the manifest's cpu_speed.checks as {"when", "cpus": [cpu_speed_summary]}
        or {"when", "error"}: before the wake-up calibration and after every sweep, ~0.1 s each. A VM's
        CPU runs only while the hypervisor gives it a core, which its guest cannot see otherwise; the
        run summary and the goals' verdict say how much of their time the CPUs lost (analysis/cpuspeed.py).
        A check that fails is recorded as such and the capture goes on."""
        binary = NOTRACE_BIN / "rpc-cpuspeed"
        cpus = sorted(set(self.cpus.values()))
        argv = [str(binary), "--cpu", ",".join(map(str, cpus)), "--max-seconds", str(CPUSPEED_SECONDS), "--json"]
        try:
            measured = tool_json(argv, CPUSPEED_SECONDS + 10)["cpus"]
            check = {"when": when, "cpus": [cpu_speed_summary(c) for c in measured]}
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            check = {"when": when, "error": f"{binary.name}: {e} (run `make` for the binary)"}
        speed = self.manifest.setdefault("cpu_speed", {"tool": "rpc-cpuspeed", "checks": []})
        speed["checks"].append(check)
        return check

    # ------------------------------------------------------------ the cases of a transport
    def new_case(self, transport, size):
        cid = case_id(transport, self.p["proc"], size)
        cdir = self.out / "cases" / cid
        cdir.mkdir(parents=True)
        case = {"id": cid, "transport": transport, "proc": self.p["proc"], "size": size, "calls": self.p["calls"],
                "warmup": self.p["warmup"], "dir": f"cases/{cid}", "complete": False}
        self.manifest["cases"].append(case)
        return case

    def run_transport(self, transport):
        """Every size of one transport: the rounds in sweeps (sweeps()), then each case from the kept
        round: its untraced and traced runs (and user-only ones, with --user-only-runs), the traced one's
        traces kept, converted and counted, the other rounds' traces deleted. Calls after_case for each
        case once it is complete."""
        cases = [self.new_case(transport, size) for size in self.p["sizes"]]
        self.write_manifest()
        n = self.p.get("repeats", 1)
        kinds = case_kinds(self.p, self.kernel)
        with self.phase(f"{transport} sweeps"):
            runs, order, by_case, record = self.sweeps(transport, cases, kinds, n)
        self.manifest.setdefault("sweeps", {})[transport] = record
        with self.phase(f"{transport} finish"):
            for case in cases:
                self.finish_case(case, runs[case["id"]], order[case["id"]], *by_case[case["id"]], record)
                if self.after_case:
                    self.after_case(self, case)

    @contextlib.contextmanager
    def phase(self, name):
        """Time a part of the capture into the manifest's phase_seconds (where its time went)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.manifest.setdefault("phase_seconds", {})[name] = round(time.monotonic() - t0, 1)

    def clock_marks_run(self, case):
        """One run of the clock build that keeps every mark, after the case's rounds, whose marks
        keep_clock_marks keeps: the step tables' clock-read column. The rounds' clock runs keep a ring of
        the latest marks only (clock_env), for the probe effect's anchor: keeping every mark streams ~0.5
        KB of stores a call into 32 MiB on each side, which costs TCP 24096 ~0.35 us more than TCP 0,
        and the anchor needs a clock build that pays for the bytes as the untraced run does
        (analysis/MODEL.md). A run that fails is the case's clock_reads error, and
        the capture goes on."""
        rdir = self.out / case["dir"] / "clock-marks"
        rdir.mkdir(parents=True, exist_ok=True)
        self.kernel_release()
        self.step(f"{case['id']}: clock build, every mark")
        clock_out = {role: rdir / f"clock-{role}.txt" for role in ("client", "server")}
        try:
            res, pids = self.run_pair(case["transport"], case["size"], case["calls"], case["warmup"], False, rdir,
                                      "clock-marks", clock_out=clock_out)
            run = {"res": res, "pids": pids, "dir": rdir}
        except UserError as e:
            run = {"error": f"the clock build's run that keeps every mark failed: {e}"}
        self.advance()
        return run

    def keep_clock_marks(self, case, run):
        """A clock-build run's marks (make TRACE=clock: each step mark one clock read into memory, ~25 ns,
        where a tracepoint costs the call ~200; clock_marks_run), compressed, beside the case's traces
        (cases/ID/clock-client.txt.gz, clock-server.txt.gz), for the step tables' clock-read column
        (analysis/clockreads.py). Marks that are not there are recorded as the case's clock_reads error
        and the capture goes on: they are a check of the step costs. The probe effect's anchor
        (analysis/probe.py) takes every round's p50 (repeats.clock_p50_ns), which the client reports
        whatever became of the marks."""
        cdir = self.out / case["dir"]
        files = {role: cdir / f"clock-{role}.txt.gz" for role in ("client", "server")}
        try:
            if run.get("error"):
                raise UserError(run["error"])
            for role, dst in files.items():
                src = run["dir"] / f"clock-{role}.txt"
                if not src.exists():
                    raise UserError(f"the clock build's {role} wrote no marks to {src.name}")
                with src.open("rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
                    shutil.copyfileobj(f, g)
            case["clock_reads"] = {"build": "clock (make TRACE=clock)", "client_p50_ns": run["res"]["rtt_ns"]["p50"],
                                   "files": {role: f.name for role, f in files.items()}, "every_round": True,
                                   "marks_from": "a run after the rounds that keeps every mark",
                                   "rounds_keep": "a ring of the latest marks (rpc/clockmark.h CLOCKMARK_RING_SLOTS)"}
        except (UserError, OSError) as e:      # OSError: the marks could not be read or compressed
            for f in files.values():
                f.unlink(missing_ok=True)
            case["clock_reads"] = {"error": str(e)}

    def finish_case(self, case, runs, order, kept, agreeing, record):
        """The case from its kept round (agreeing: the rounds in that round's level), traces of the
        others deleted."""
        cid, cdir = case["id"], self.out / case["dir"]
        calls, warmup = case["calls"], case["warmup"]
        traced_build = self.p["untraced"] == "stopped"
        res_u = runs["untraced"][kept]["res"]
        (cdir / "client-untraced.json").write_text(json.dumps(res_u, indent=2) + "\n")
        case["untraced"] = _rtt(res_u)
        case["untraced_build"] = "trace (no session recording)" if traced_build else "notrace (TRACE=0)"
        self.step(f"{cid}: convert and count")
        kept_run = runs["traced"][kept]
        n_k, k_lost, per_event = self.keep_run(kept_run, cdir)
        if "clock" in runs:
            self.keep_clock_marks(case, self.clock_marks_run(case))
        self.discard(cdir)
        res_t, pids, got = kept_run["res"], kept_run["pids"], kept_run["got"]
        ust_dir = cdir / "ust"
        (cdir / "client-traced.json").write_text(json.dumps(res_t, indent=2) + "\n")
        case["pids"] = pids
        case["traced"] = _rtt(res_t)
        case["repeats"] = {"rounds": record["rounds"], "extra_rounds": record["extra_rounds"], "kept_round": kept,
                           "agreeing_rounds": agreeing, "order": order,
                           **{f"{k}_p50_ns": [r["res"]["rtt_ns"]["p50"] for r in v] for k, v in runs.items()},
                           **{f"{k}_pace_ns": [run_pace_ns(r["res"]) for r in v] for k, v in runs.items()},
                           **{f"{k}_sleeps_per_call": [r.get("sleeps") for r in v] for k, v in runs.items()}}
        if record.get("turns"):      # the runs took turns (--turns): analysis/run.py level_rounds_p50s
            case["repeats"]["turns"] = {"turn_calls": record["turns"]["turn_calls"],
                                        "round_speed": record["turns"]["round_speed"],
                                        **{f"{k}_turns": [r["turns"]["count"] for r in v] for k, v in runs.items()}}
        case["sleeps_per_call"] = {k: v[kept].get("sleeps") for k, v in runs.items()}
        # Every round's client summary, its histogram included: the rounds a case did not keep still
        # show which modes their calls fell in, which a level's p50s alone cannot tell from a switch
        # of the host's speed level (analysis/MODEL.md).
        (cdir / "rounds.json").write_text(json.dumps(
            {"format": ROUNDS_FORMAT, "kept_round": kept,
             "kinds": {k: [{"round": r, "rtt_ns": x["res"].get("rtt_ns"), "rtt_hist": x["res"].get("rtt_hist"),
                            "pace": x["res"].get("pace"),
                            "sleeps_per_call": x.get("sleeps")} for r, x in enumerate(v)] for k, v in runs.items()}})
            + "\n")
        if "ust" in runs:
            case["ust_only"] = _rtt(runs["ust"][kept]["res"])
        n_ust, d_ust, dp_ust = bt_count(ust_dir)
        total = calls + warmup
        losses = {"ust_discarded": got["ust"]["discarded_events"] + d_ust,
                  "ust_lost_packets": got["ust"]["lost_packets"] + dp_ust, "kernel_lost": k_lost}
        case.update({
            "events": {"ust": n_ust, "kernel": n_k},
            "events_per_call": {"ust": round(n_ust / total, 2), "kernel": round(n_k / total, 2)},
            "kernel_events_by_name": per_event,
            "kernel_event_set": got.get("kernel_events", []),
            "losses": losses,
            "lossy": any(losses.values()),
            "trace_bytes": {"ust": dir_bytes(ust_dir), "kernel": dir_bytes(cdir / "kernel")},
        })
        case["trace_bytes_per_1000_calls"] = round((case["trace_bytes"]["ust"] + case["trace_bytes"]["kernel"])
                                                   * 1000 / total)
        for f in cdir.glob("server-*.log"):
            if f.stat().st_size == 0:
                f.unlink()
        case["complete"] = True
        self.write_manifest()
        self.advance()
        return case

    # ------------------------------------------------------------ the whole run
    def base_manifest(self):
        kernel_release = platform.release()
        link = self.tb["link"]
        from rpcscope.testbed import fmt_rate
        hosts = {}
        for role in ("client", "server"):
            h = self.hosts[role]
            hosts[h["name"]] = {"role": role, "address": h["address"], "kernel": kernel_release,
                                "cpu_model": cpu_model(), "cpus": [self.cpus[role]], "clocksource": clocksource(),
                                "ifname": h["ifname"]}
        return {
            "format": FORMAT, "complete": False, "interrupted": False,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "finished": None, "git_commit": git_commit(), "params": self.p,
            "testbed": {"kind": "local", "shared_kernel": True, "shared_sessiond": True,
                        "link": {"rate": fmt_rate(link.get("rate_bit")), "rate_bit": link.get("rate_bit"),
                                 "mtu": link.get("mtu"), "loss": link.get("loss_percent")},
                        "devices": self.devices()},
            "hosts": hosts,
            "placement": self.p["placement"], "wait": self.p["wait"],
            "idle": idle.IdlePolicy(self.p.get("idle", "poll")).record(),
            "aslr": aslr_record(self.p.get("aslr", "off")),
            "server_wait": {t: self.server_wait(t) for t in self.p["transports"]},
            "server_executors": self.p["executors"],
            "kernel_collector": self.kernel,
            "kernel_collectors": {"shared": self.kernel} if self.kernel != "none" else {},
            "clock": "monotonic",
            "kernel_clock_aligned_to_ust": self.kernel in ("perf", "ftrace"),
            "tools": tool_versions(self.kernel),
            "binaries": {"traced": str(TRACE_BIN), "untraced": str(NOTRACE_BIN)},
            "calibration": {}, "cases": [],
        }

    def run(self):
        self.started = time.monotonic()          # --deadline-seconds counts from here (seconds_left)
        # A killed capture's server, perf, sessions and tracefs instances would hold ports and cost the
        # calls: removed first, and said (collectors/leftovers.py).
        removed = leftovers.clean()
        self.out.mkdir(parents=True)
        # What this capture starts, recorded before it starts it; removed at its clean end.
        self.state = leftovers.CaptureState(self.out)
        self.state.open()
        self.manifest = self.base_manifest()
        if removed:
            self.say_removed("found before it started", removed)
        self.write_manifest()
        # SIGTERM and Ctrl-C interrupt, and the capture cleans up (rpcscope/interrupts.py).
        with interruptible():
            return self._run()

    def _run(self):
        idle_policy = idle.IdlePolicy(self.p.get("idle", "poll"))
        try:
            idle_policy.__enter__()
            self.sessiond.ensure()
            with self.phase("calibration"):
                if self.p["calibration"] != "none":
                    self.manifest["calibration"] = self.calibrate()
                    self.write_manifest()
                self.cpu_speed_check("start")
                self.manifest["wake_calibration"] = self.wake_calibration()
            self.write_manifest()
            if in_situ(self.p, self.kernel):
                # In situ: the analysis solves the cases' traced minus untraced p50s for the cost of
                # each event class on the path (analysis/probe.py).
                self.manifest["calibration_in_situ"] = {"method": "per case", "complete": True,
                                                        "user_only_runs": "ust" in case_kinds(self.p, self.kernel)}
                self.write_manifest()
            for transport in self.p["transports"]:
                self.run_transport(transport)
            self.manifest["complete"] = True
        except KeyboardInterrupt:
            self.manifest["interrupted"] = True
            raise
        finally:
            with uninterrupted():
                self.cleanup()
                idle_policy.close()
                self.manifest["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
                self.write_manifest()
                self.state.close()
        return self.manifest

    def cleanup(self):
        if self.perf:
            self.perf.kill()
            self.stopped_perf.append(self.perf)
            self.perf = None
        if self.case_perf:
            self.case_perf.kill()           # disabled since the last traced run: nothing left to keep
            self.case_perf = None
            shutil.rmtree(self.out / ".perf", ignore_errors=True)
        for rec in (self.case_ftrace, self.calib_ftrace):
            if rec:
                rec.stop()
        self.case_ftrace = self.calib_ftrace = None
        for rec in self.stopped_perf:            # an interrupted case's rounds: nothing to convert
            rec.data.unlink(missing_ok=True)
        self.stopped_perf = []
        self.procs.stop_all()
        for name in list(self.sessions):
            lttng.run_lttng(["destroy", name], check=False)
            self.sessions.remove(name)
            leftovers.forget("lttng_sessions", name)
        self.sessiond.restore()
        for f in self.out.rglob("perf-*.fifo"):
            f.unlink(missing_ok=True)
        for case in (self.manifest or {}).get("cases", []):
            if not case.get("complete"):           # interrupted before its round was kept: nothing to keep
                self.discard(self.out / case["dir"])


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


# Two rounds agree when their runs' p50s differ by at most this much (root mean square of the % differences
# over every case and kind). One run's p50 is usually within 1-2 % of the next identical one's; a switch
# of the host's speed level moves every run 20-30 %, a burst in one run of a 24-run sweep moves it ~5 %.
SWEEP_AGREE_PCT = 3.0
# The sweeps are settled when this many rounds (or every round, with fewer) agree with the kept one,
# itself included; else up to MAX_EXTRA_ROUNDS more sweeps are made.
SWEEP_SETTLE_ROUNDS = 3
MAX_EXTRA_ROUNDS = 6
# ... and no more of one transport's extra sweeps than fit in this many seconds (each estimated as the
# median sweep so far): where the rounds never settle, six extra sweeps of both transports take a
# `make run` close to the 10 minutes it must finish in (UDP's sweeps 14-20 s, TCP's 9-11 s), and a
# slower host passes it; 60 s is four UDP sweeps, five TCP, and a capture that needs more rarely
# settles in them.
EXTRA_SWEEP_SECONDS = 60.0
# What one case's finish (finish_case: its kept traces moved, converted and counted, its clock-marks run)
# is taken to cost when a --deadline-seconds sets aside time for the finishes still to come
# (Capture.seconds_left): UDP's eight take 28 s and TCP's 14 s on a slow host; the larger figure, so
# that the estimate errs towards ending the extra sweeps early.
FINISH_SECONDS_PER_CASE = 3.5


def sweeps_end(agreeing, rounds, repeats, seconds, budget, seconds_left=None):
    """Why sweeps() makes no more extra sweeps after `rounds` (repeats of them planned, `seconds` each
    took, `agreeing` the rounds that agree with the kept one): "settled", "single round" (nothing to
    agree), "most extra rounds" (MAX_EXTRA_ROUNDS), "extra-sweep seconds" (another would pass `budget`
    seconds of extra sweeps), "capture deadline" (another would not fit in the `seconds_left` the
    capture's --deadline-seconds leaves, Capture.seconds_left; None: no deadline), or None to make another."""
    if repeats <= 1:
        return "single round"
    if sweeps_settled(agreeing, rounds):
        return "settled"
    if rounds >= repeats + MAX_EXTRA_ROUNDS:
        return "most extra rounds"
    if sum(seconds[repeats:]) + statistics.median(seconds) > budget:
        return "extra-sweep seconds"
    if seconds_left is not None and statistics.median(seconds) > seconds_left:
        return "capture deadline"
    return None


def _p50s(runs, clock=False):
    """{(case id, kind): [p50 ns of each round]} of sweeps()' runs. The clock build's runs are left out
    unless `clock`: which round of sweeps is kept, and in which level, is chosen as it was before they
    ran in every round. Runs that took turns keep them (turns_record), as the analysis's factors do."""
    return {(cid, k): [r["res"]["rtt_ns"]["p50"] for r in rs] for cid, kinds in runs.items()
            for k, rs in kinds.items() if clock or k != "clock"}


def sweep_distances(p50s):
    """Matrix of the root mean square % difference between two rounds' runs (100 ln of the ratio of
    their p50s, over every case and kind). p50s: {(case, kind): [p50 per round]}, every list as long."""
    rounds = min(len(v) for v in p50s.values())
    logs = [[math.log(v[r]) for v in p50s.values()] for r in range(rounds)]
    return [[100 * math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)) for b in logs] for a in logs]


def choose_sweep(p50s):
    """(the kept round, the rounds that agree with it, the distance matrix). Kept: the round with the
    most others within SWEEP_AGREE_PCT of it (the host's prevailing speed level, every size in it, no
    burst), the one closest to those (the smallest mean distance), the earliest of equals. A round
    whose sizes straddle a switch of level agrees with none; per-case medians would not see that (with
    the level changing inside a sweep, half the cases' medians lie in each level, and the straddling
    round is closest to them all)."""
    dist = sweep_distances(p50s)
    rounds = range(len(dist))
    agree = [[q for q in rounds if dist[r][q] <= SWEEP_AGREE_PCT] for r in rounds]
    kept = min(rounds, key=lambda r: (-len(agree[r]), round(sum(dist[r][q] for q in agree[r]) / len(agree[r]), 6), r))
    return kept, agree[kept], dist


KIND_ORDER = ("untraced", "ust", "traced")


def straddle_pct(p50s, among=None):
    """Per round of one case, how far the differences between its consecutive kinds (traced minus
    untraced; with user-only runs, user-only minus untraced and traced minus user-only: the probe
    effect, CPU work that a level of the host's speed barely moves) stray from their medians over the
    rounds, the largest, as % of the median untraced p50. A round whose kinds ran in different levels
    strays by the jump between levels (an untraced run in the faster level, user-only and traced in the
    slower one: a user share of 8.8 us against a median 5.0, 14 % of the RTT).
    p50s: {(case, kind): [p50 per round]} of one case; among: the rounds whose medians count (default
    every round)."""
    rounds = min(len(v) for v in p50s.values())
    among = list(range(rounds)) if among is None else list(among)
    by_kind = {k: v for (_, k), v in p50s.items()}
    kinds = [k for k in KIND_ORDER if k in by_kind]
    if len(kinds) < 2 or "untraced" not in by_kind:
        return [0.0] * rounds
    base = statistics.median(by_kind["untraced"][r] for r in among)
    diffs = [[by_kind[b][r] - by_kind[a][r] for r in range(rounds)] for a, b in zip(kinds, kinds[1:])]
    meds = [statistics.median(d[r] for r in among) for d in diffs]
    return [max(abs(d[r] - m) for d, m in zip(diffs, meds)) * 100 / base for r in range(rounds)]


def fastest_round(p50s):
    """(round, the rounds that agree with it) of one case when no sweep settled: of the rounds whose
    kinds ran in one level of the host's speed (straddle_pct within SWEEP_AGREE_PCT; else the one that
    strays least), the one whose runs are together the fastest (least sum of ln p50 over the kinds),
    i.e. every kind in the host's faster level at once. Why: with the level changing inside every
    sweep (every few seconds), the kept sweep's sizes straddle levels and the model misses by 5-17 %;
    a level is the host's, so each size's fastest whole round puts every size in the same one (the
    slower level's rounds spread more: sizes disagree about which of them is "the" slow level). The
    least sum alone can come from one kind's fast run beside slow ones (14 % of the RTT off the
    others' probe effect), which no correction mends.
    p50s: {(case, kind): [p50 per round]} of one case."""
    rounds = min(len(v) for v in p50s.values())
    stray = straddle_pct(p50s)
    whole = [q for q in range(rounds) if stray[q] <= SWEEP_AGREE_PCT] or [min(range(rounds), key=lambda q: stray[q])]
    r = min(whole, key=lambda q: (sum(math.log(v[q]) for v in p50s.values()), q))
    dist = sweep_distances(p50s)
    return r, [q for q in range(rounds) if dist[r][q] <= SWEEP_AGREE_PCT]


# This VM's speed levels lie 20-30 % apart (collectors/README.md); the runs of one level within a few %.
# A run more than LEVEL_GAP above the fastest round of its case and kind is in a slower level.
LEVEL_GAP = 0.10
# A round whose probe effect strays from the others' by more than this (% of the RTT, straddle_pct) had
# a kind in another level: a switch moves one kind's p50 by 20-30 %, while the probe effect of the two
# levels differs by 3-5 % (UDP 8032).
STRADDLE_LEVEL_PCT = 100 * LEVEL_GAP / 2


def run_levels(p50s, order=None):
    """{(case, kind): [0 in the faster level, 1 in a slower one, per round]}. A case and kind whose
    rounds spread over more than LEVEL_GAP saw both levels: a run within LEVEL_GAP of its fastest round
    is in the faster level, else in a slower one. A case and kind whose rounds all lie within LEVEL_GAP
    of each other ran in one level, but which one its p50s cannot say: a level is the host's at a time,
    so all its rounds take the level that most of the runs nearest them in time had (of the others,
    the one before and the one after each round, in the order the capture ran them: round by round,
    case by case in `order`, kind by kind; the faster level on a tie, and when no case and kind saw
    both levels).

    Why: where the host is fast for one round only, a kind whose runs are slow in every round would be
    called fast by its own fastest round; then a size can have no whole round in the slower level, the
    faster level can win on a tie, and such sizes fall back to slow rounds beside fast sizes (the model
    then misses them by +14 to +19 %). p50s: {(case, kind): [p50 per round]}; order: its keys in the
    order of one round (default: p50s')."""
    order = list(order or ()) + [k for k in p50s if k not in (order or ())]
    levels = {k: [0 if x <= min(v) * (1 + LEVEL_GAP) else 1 for x in v] for k, v in p50s.items()}
    both = {k: lv for k, lv in levels.items() if any(lv)}
    if not both:
        return levels
    n, pos = len(order), {k: i for i, k in enumerate(order)}
    timeline = sorted((r * n + pos[k], lv) for k, lvs in both.items() for r, lv in enumerate(lvs))
    times = [t for t, _ in timeline]

    def nearest(t):
        i = bisect.bisect_left(times, t)
        return [timeline[j][1] for j in (i - 1, i) if 0 <= j < len(timeline)]
    for k, lv in levels.items():
        if k not in both:
            votes = [x for r in range(len(lv)) for x in nearest(r * n + pos[k])]
            levels[k] = [int(2 * sum(votes) > len(votes))] * len(lv)
    return levels


def level_rounds(p50s, cases):
    """When no sweep settled: (the level, {case: (round, the rounds that agree with it)}) with every
    case's kept round in one level of the host's speed (0 the faster, 1 a slower one). A round of a
    case is whole in a level when each of its kinds' runs is (run_levels) and its probe effect agrees
    with theirs (straddle_pct among them, when there are three or more, else among every round,
    within STRADDLE_LEVEL_PCT); the level is the one in which the most cases have a whole round, the
    faster of equals; each case keeps, of its whole rounds in that level, the most central (the least
    sum over its kinds of |ln p50 - their median|), and a case with none there its fastest whole round
    (fastest_round). The probe effect guards against a round whose kinds ran in levels LEVEL_GAP
    cannot tell apart (a host with three levels, where a "fast" round's user-only run can be 16 us
    faster than its untraced one), and the count of cases against a level where one size has no
    whole round. Why not each size's fastest whole round alone: the probe effect differs between
    levels (UDP 8032: traced minus user-only 29.5 us in the faster level, 26.6 in the slower), so
    straddle_pct, measured against the median over the rounds, refuses a size's fast rounds when most
    of its rounds are slow, and it would keep a slow one beside sizes kept fast (the model then misses
    that size by ~18 %). p50s: {(case, kind): [p50 per round]}; cases: the case ids."""
    levels = run_levels(p50s, [(c, k) for c in cases for k in KIND_ORDER if (c, k) in p50s])
    rounds = min(len(v) for v in p50s.values())
    by_case = {c: {k: v for k, v in p50s.items() if k[0] == c} for c in cases}

    def candidates(mine, level):
        whole = [r for r in range(rounds) if all(levels[k][r] == level for k in mine)]
        stray = straddle_pct(mine, whole if len(whole) >= 3 else None)
        return [r for r in whole if stray[r] <= STRADDLE_LEVEL_PCT]
    cand = {(c, lv): candidates(by_case[c], lv) for c in cases for lv in (0, 1)}
    level = min((0, 1), key=lambda lv: (-sum(1 for c in cases if cand[c, lv]), lv))
    out = {}
    for c in cases:
        mine = by_case[c]
        rs = cand[c, level]
        if not rs:
            out[c] = fastest_round(mine)
            continue
        r = most_central(mine, rs)
        dist = sweep_distances(mine)
        out[c] = (r, [q for q in rs if dist[r][q] <= SWEEP_AGREE_PCT])
    return level, out


def settled_rounds(p50s, case, kept, agreeing):
    """(round, the rounds that agree with it) of one case of a transport whose sweeps settled: the kept
    sweep's round and the agreeing ones, less those whose probe effect strays from the case's other
    rounds' by more than STRADDLE_LEVEL_PCT (straddle_pct over every round): one of its kinds caught a
    burst the sweep's distance, an rms over every case, does not show. If the kept round is such a
    round, the most central of the others (the least sum over its kinds of |ln p50 - their median|).
    Why: a kept round's untraced run can be 9 % slow (slower than its user-only run), as another
    agreeing round's, and then Measured, the median of three, is 9 % high and the model misses that
    size by as much. About one case in ten drops a round this way, one in a hundred changes its kept
    one.
    p50s: {(case, kind): [p50 per round]}."""
    mine = {k: v for k, v in p50s.items() if k[0] == case}
    stray = straddle_pct(mine)
    whole = [r for r in agreeing if stray[r] <= STRADDLE_LEVEL_PCT]
    if not whole:
        return kept, agreeing
    return (kept if kept in whole else most_central(mine, whole)), whole


def most_central(p50s, rounds):
    """Of rounds, the one nearest the middle of them all: the least sum over its kinds of |ln p50 - the
    kind's median over rounds| (the earliest of equals). p50s: {(case, kind): [p50 per round]} of one case."""
    med = {k: statistics.median(math.log(v[r]) for r in rounds) for k, v in p50s.items()}
    return min(rounds, key=lambda q: (sum(abs(math.log(v[q]) - med[k]) for k, v in p50s.items()), q))


def _probe_effects(p50s):
    """{(case, kind): [ln(p50 / the round's untraced p50) per round]} for every kind but untraced."""
    return {(c, k): [math.log(x / u) for x, u in zip(v, p50s[(c, "untraced")])]
            for (c, k), v in p50s.items() if k != "untraced" and (c, "untraced") in p50s}


def turns_kept_round(p50s):
    """The round that lies nearest the middle of the rounds once the host's moments are taken out:
    the least sum of |x - its median over the rounds| over every case's kinds, x = ln(p50 / the case's
    factor in the round), and over every case, x = ln(the case's factor / the round's speed)
    (case_factors, round_speeds): its kinds stand to each other, and its sizes to each other, as
    in most rounds. Its traces are then scaled the least to the rounds' medians (the model's
    traced_scale), and its sizes fit one line as the medians do. The earliest of equals.
    p50s: {(case, kind): [p50 per round]}."""
    factors, speed = case_factors(p50s), round_speeds(p50s)
    dev = [[math.log(x / f) for x, f in zip(v, factors[c])] for (c, _), v in p50s.items()]
    dev += [[math.log(f / q) for f, q in zip(v, speed)] for v in factors.values()]
    med = [statistics.median(v) for v in dev]
    return min(range(len(speed)), key=lambda r: (round(sum(abs(v[r] - m) for v, m in zip(dev, med)), 9), r))


def case_factors(p50s):
    """{case: [how fast the host ran the case in each round]}: exp of the mean over its kinds of ln(p50 /
    the kind's median over the rounds), as analysis/run.py case_round_factors reads it from a case."""
    n = min((len(v) for v in p50s.values()), default=0)
    out = {}
    for (c, _), v in p50s.items():
        logs = [math.log(x) for x in v[:n]]
        mid = statistics.median(logs)
        out.setdefault(c, []).append([x - mid for x in logs])
    return {c: [math.exp(sum(k[r] for k in ks) / len(ks)) for r in range(n)] for c, ks in out.items()}


def turns_spread_pct(p50s):
    """The median over cases and kinds of half the spread of 100 ln(p50 / the round's untraced p50)
    over the rounds: how far a probe effect moves from round to round when the runs take turns."""
    spreads = [100 * (max(v) - min(v)) / 2 for v in _probe_effects(p50s).values() if len(v) > 1]
    return round(statistics.median(spreads), 2) if spreads else None


def round_speeds(p50s):
    """Each round's speed relative to the rounds' middle: exp of the mean over every case and kind of
    ln(p50 / the kind's median over the rounds); 1.1 a round whose runs all took 10 % longer. The
    manifest's record of how far the rounds moved as a whole (sweeps.<t>.turns.round_speed); the figures
    take each case's own factor (case_factors), for a round moves the sizes unlike each other. Every
    case of a capture has the same kinds, so the mean over cases and kinds is the mean over the cases
    of their factors' logs. p50s: {(case, kind): [p50 per round]}."""
    factors = list(case_factors(p50s).values())
    n = min((len(f) for f in factors), default=0)
    return [round(math.exp(sum(math.log(f[r]) for f in factors) / len(factors)), 5) for r in range(n)]


def turn_buffer_kb(calls, frags):
    """A tracefs ring per CPU for one traced run taking turns (one instance a case): room for its
    events, ~40 a fragment and 40 more a call at ~48 bytes (manifest events_per_call: UDP 24096, 6
    fragments, 190 a call), twice over, between 8 MiB and the sequential runs' 256 MiB. Why not 256 MiB
    each: a transport's cases hold theirs at once."""
    need = calls * (40 + 40 * frags) * 48 * 2 // 1024
    return int(min(ftrace.BUFFER_KB, max(8192, need)))


def sweeps_settled(agreeing, rounds):
    return len(agreeing) >= min(SWEEP_SETTLE_ROUNDS, rounds)


def sweeps_summary(sweeps):
    """The capture's rounds per transport and the round every figure of its cases comes from."""
    if not sweeps:
        return None
    return "; ".join(
        _turns_summary(t, v) if v.get("turns") else
        f"{t}: {v['rounds'] + v['extra_rounds']} sweeps of every size ({v['extra_rounds']} extra), round "
        f"{v['kept_round']} kept, {len(v['agreeing_rounds'])} rounds agree within {v['agree_pct']:g} % "
        f"({', '.join(map(str, v['agreeing_rounds']))})" + _kept_note(v)
        for t, v in sweeps.items())


def _turns_summary(transport, sweep):
    t = sweep["turns"]
    speed = t.get("round_speed") or [1.0]
    cut = (f" (of {sweep['rounds_asked']} asked: the capture's deadline, {sweep['deadline_seconds']:g} s, "
           "--deadline-seconds)") if sweep.get("ended") == "capture deadline" else ""
    return (f"{transport}: {sweep['rounds']} rounds{cut}, the {t['runs_per_round']} runs of each (every size and kind) "
            f"taking turns of {t['turn_calls']} calls (a median {t['turns_per_run_median']:g} turns a run); round "
            f"{sweep['kept_round']} kept for every size's traces, every figure the median of the rounds' p50s, each "
            f"over how fast the host ran its size in that round (the rounds' speeds ranged over {min(speed):.2f}-{max(speed):.2f}; the probe effects moved by a "
            f"median {t['probe_effect_spread_pct']} % between rounds)")


def unsettled_transports(manifest, transports):
    """Of transports, those whose sweeps never settled (manifest sweeps.<t>.settled), for the model's
    verdict (analysis/model.py goal_verdict)."""
    sweeps = (manifest or {}).get("sweeps") or {}
    return [t for t in transports if (sweeps.get(t) or {}).get("settled") is False]


def _kept_note(sweep):
    if sweep.get("settled"):
        other = {c: k for c, k in (sweep.get("kept_by_case") or {}).items() if k != sweep.get("kept_round")}
        return ("; sizes whose kept round had a kind off its level keep another (rounds " +
                ", ".join(f"{c.split('-')[-1]}: {k}" for c, k in other.items()) + ")") if other else ""
    note = f", NOT settled: fewer than {SWEEP_SETTLE_ROUNDS} rounds agreed, the host's speed level kept changing"
    if sweep.get("ended") == "extra-sweep seconds":
        note += f" (extra sweeps ended by their {sweep['extra_sweep_seconds']:g} s: --extra-sweep-seconds)"
    elif sweep.get("ended") == "capture deadline":
        note += (f" (extra sweeps ended by the capture's deadline, {sweep['deadline_seconds']:g} s: "
                 "--deadline-seconds)")
    if sweep.get("kept_by_case"):
        how = (f"most central whole round in the host's {sweep['level']} level" if sweep.get("level")
               else "fastest whole round")                   # a record without "level": fastest_round
        note += (f"; each size's {how} kept instead (rounds " +
                 ", ".join(f"{c.split('-')[-1]}: {k}" for c, k in sweep["kept_by_case"].items()) + ")")
    return note


# cases/ID/rounds.json: every round's rpc-client summary and histogram per kind (finish_case).
ROUNDS_FORMAT = "rpcscope-rounds/1"


def tool_json(argv, timeout):
    """The JSON one of the project's own measuring tools (rpc-wakecal, rpc-cpuspeed) printed. Raises
    OSError (it could not start), subprocess.TimeoutExpired, or ValueError: it exited non-zero (the
    last 300 characters of its message) or printed no JSON."""
    cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise ValueError((cp.stderr.strip() or f"exit {cp.returncode}")[-300:])
    return json.loads(cp.stdout)


def run_pace_ns(res):
    """A run's CPU pace: the mean of the fastest slices rpc-client timed before and after its calls
    (--pace-slices), in ns; None where it timed none."""
    pace = res.get("pace") or {}
    mins = [pace[w]["min_ns"] for w in ("before", "after") if (pace.get(w) or {}).get("slices")]
    return round(sum(mins) / len(mins)) if mins else None


def cpu_speed_summary(cpu):
    """One CPU of rpc-cpuspeed's JSON, its slices' times summed (the manifest keeps no slice): {"cpu",
    "slices", "min_ns", "p50_ns", "max_ns", "sum_ns"}. With the run's fastest slice on that CPU, sum_ns
    gives the share of the check's time the CPU lost (analysis/cpuspeed.py lost_pct)."""
    return {"cpu": cpu["cpu"], "slices": cpu["slices"], "min_ns": cpu["min_ns"], "p50_ns": cpu["p50_ns"],
            "max_ns": cpu["max_ns"], "sum_ns": sum(cpu["slice_ns"])}


def sleeps_per_call(res, server_stats_path, ipis=None, calls=None, turn_waits=(0, 0)):
    """How often the client and the server slept per call in one run: the client's voluntary context
    switches over its measured calls (rpc-client --json "switches") and the server's since it started
    (--stats-json, all threads) per request it received. A sleep is a wait that blocked, so two runs
    whose counts differ took different paths (a reply or fragment that came before or after its reader
    waited), which no tracing is needed to see. With ipis (ipi_delta over the client's run of `calls`
    calls, warm-up included): the interrupts per call each CPU got from the other, "client_ipi" and
    "server_ipi": a wake-up whose wakee had not yet left its CPU, or whose CPU was not polling, is sent
    as an interrupt, which costs this VM ~12 us where a polling CPU's costs about none.
    A traced server's count includes its tracer's threads (LTTng-UST's: ~0.03 a request here).
    turn_waits (--turns): (the client's waits for a turn while it measured, its turns): those are no
    part of a call, and each turn's gap costs the server at most one sleep more; both are taken off.
    None where the binaries predate the counts."""
    sw = res.get("switches")
    try:
        st = json.loads(pathlib.Path(server_stats_path).read_text())
    except (OSError, ValueError):
        st = {}
    if not sw or not res.get("calls") or "voluntary_switches" not in st or not st.get("requests"):
        return None
    out = {"client": round(max(0, sw["voluntary"] - turn_waits[0]) / res["calls"], 3),
           "server": round(max(0, st["voluntary_switches"] - turn_waits[1]) / st["requests"], 3)}
    if ipis and calls:
        out.update({f"{role}_ipi": round(n / calls, 3) for role, n in ipis.items()})
    return out


# The inter-processor interrupts that carry a wake-up to another CPU (/proc/interrupts): RES,
# rescheduling; CAL, function call (the scheduler's queued wake-ups, ttwu_queue_wakelist).
IPI_ROWS = ("RES", "CAL")


def ipi_counts(path="/proc/interrupts"):
    """{cpu number: RES + CAL so far}; {} where the file cannot be read. One kernel serves both hosts
    of the local testbed, so this counts both."""
    try:
        lines = pathlib.Path(path).read_text().splitlines()
    except OSError:
        return {}
    if not lines:
        return {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    out = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        parts = line.split()
        if parts and parts[0].rstrip(":") in IPI_ROWS:
            for cpu, n in zip(cpus, parts[1:]):
                if n.isdigit():
                    out[cpu] += int(n)
    return out


def ipi_delta(before, after, cpus):
    """{"client": n, "server": n}: the IPIs each role's CPU got between the two ipi_counts; None when
    either count is missing or both roles share a CPU (the count could not say whose it was)."""
    if not before or not after or cpus["client"] == cpus["server"]:
        return None
    try:
        return {role: after[cpu] - before[cpu] for role, cpu in (("client", cpus["client"]),
                                                                   ("server", cpus["server"]))}
    except KeyError:
        return None


def _rtt(res):
    r = dict(res.get("rtt_ns", {}))
    r.update({"calls": res.get("calls"), "errors": res.get("errors"), "calls_per_s": res.get("calls_per_s"),
              "unit": "ns"})
    if "first_call_ns" in res:
        r["first_call_ns"] = res["first_call_ns"]
    return r


def prepare_out(out, replace):
    out = pathlib.Path(out)
    if out.exists():
        if not replace:
            raise UserError(f"{out} already exists; choose another --out, or pass --replace to overwrite that run")
        if any(out.iterdir()) and not (out / "manifest.json").exists():
            raise UserError(f"{out} exists and is not a capture run (no manifest.json); refusing to replace it")
        shutil.rmtree(out)
    if not out.parent.exists():
        out.parent.mkdir(parents=True)
    return out
