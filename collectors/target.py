"""Capture of an RPC rpcscope did not write: an unmodified client and server on the local testbed's two
hosts, recorded with kernel events only (`rpcscope run --target libtirpc|grpc|reference`).

Two tracefs instances (collectors/ftrace.py FtraceRecorder), both on CLOCK_MONOTONIC, which the
namespace hosts share (one kernel: the two hosts' events are on one clock by construction):

    programs  the send/receive system calls (and socket, accept, close, to tell an fd's sockets
              apart), sched_waking and sched_switch, of the target's processes and threads only: each
              program starts under a shell that appends its own pid to the instance's set_event_pid
              before it execs, and options/event-fork adds every thread and child it makes
    net       net_dev_xmit and netif_receive_skb on the two hosts' interfaces, in any context (a
              softirq runs in whichever task it interrupts, so no pid filter), and on the hops between
              them (the bridge's side of each host's veth pair): those run the instance's probe whether
              its device filter keeps them or not, so they are recorded, to be charged, never matched

Beside the traces, a poller reads the programs' sockets from /proc while the calls run (fd -> inode ->
the 4-tuple in /proc/PID/net/{tcp,udp}[6]), each sighting with its CLOCK_MONOTONIC time, which the
analysis (analysis/kernelonly.py) uses to name each fd's socket and pair the client's with the
server's. The client's own JSON (its RTT percentiles) is kept for the comparison.

The servers start once per case and serve three runs of the same client: an untraced one (the
instances' events off), the traced one (events on; the trace holds only it), and an untraced one
again. The untraced runs' p50s, on either side of the traced one, are what the recorded events cost
the program's RTT (the kernel-only analysis's probe calibration).

    case/programs/  case/net/       the instances' raw dumps (cpuN.raw, formats.json, tgids.json)
    case/sockets.json               the poller's sightings and the programs' pids
    case/program.json               the traced client's own report
    case/program-untraced-N.json    the untraced runs' reports (1: before the traced run, 2: after)

KernelOnlyRecording (the two instances and the poller of one client and its server) is also what
`rpcscope capture --turns --kernel-only-runs` records its kernel-only runs with (collectors/sweeps.py),
into a target run inside the capture's run (RUN/kernelonly/).
"""
import dataclasses
import gzip
import json
import os
import pathlib
import re
import struct
import subprocess
import threading
import time

from rpcscope.experiments import systems
from rpcscope.output import UserError
from rpcscope.rundir import TARGET_CASE_JSON, TARGET_EVENT_CPU, TARGET_EVENTS, TARGET_FORMAT
from rpcscope.tracepoints.targetsteps import by_id

from . import ftrace, perf
from .idle import IdlePolicy
from .uprobes import Uprobes, resolve

# --target name -> the experiments' system (rpcscope/experiments/systems.py)
TARGETS = {"libtirpc": "tirpc", "grpc": "grpc", "reference": "rpcscope"}
# Each system's client and server programs (where --uprobe looks for its functions, with their libraries).
PROGRAMS = {"tirpc": (systems.PEERS_BIN / "tirpc-client", systems.PEERS_BIN / "tirpc-server"),
            "grpc": (systems.PEERS_BIN / "grpc-client", systems.PEERS_BIN / "grpc-server"),
            "rpcscope": (systems.NOTRACE_BIN / "rpc-client", systems.NOTRACE_BIN / "rpc-server")}
# The peers' own call function, which encloses each call (peers/tirpc/tirpc_client.c, peers/grpc/grpc_client.cc):
# a --uprobe there measures the call's edges KC1, KC2 (analysis/TARGET.md).
CALL_FUNCTIONS = {"libtirpc": "peer_call", "grpc": "(anonymous namespace)::peer_call"}
SEND_SYSCALLS = tuple(e.split("sys_enter_", 1)[1] for e in by_id("K1").kernel_begin)
RECV_SYSCALLS = tuple(e.split("sys_exit_", 1)[1] for e in by_id("K5").kernel_end)
# What tells one socket on an fd number from the next: its creation and its closing.
LIFE_EVENTS = ("syscalls:sys_exit_socket", "syscalls:sys_exit_accept", "syscalls:sys_exit_accept4",
               "syscalls:sys_enter_close")
# The returns from the waits a woken thread comes out of: where the trace lacks its switch in, its
# first event after the waking is where it runs again (analysis/kernelonly.py).
WAIT_EXITS = tuple(f"syscalls:sys_exit_{s}" for s in ("poll", "ppoll", "select", "pselect6", "epoll_wait",
                                                       "epoll_pwait", "epoll_pwait2"))
SCHED = ("sched:sched_waking", "sched:sched_switch")
NET = ("net:net_dev_xmit", "net:netif_receive_skb")
# The switches out of the idle task, unfiltered by pid, in the net instance: the pid-filtered instance
# leaves out a switch from the idle task into a traced thread (of a server's switches in, only those
# from another task are kept), and with them a woken thread's start on an idle CPU.
IDLE_SWITCH = "sched:sched_switch"
IDLE_SWITCH_FILTER = "prev_pid == 0"
BUFFER_KB = 32768
POLL_FAST_S, POLL_SLOW_S = 0.0005, 0.05
# How long the poller keeps polling fast after its last new sighting: a program opens its sockets one
# after another (libtirpc: rpcbind's, then the server's), each within this of the one before.
POLL_QUIET_S = 0.01
PROC_NET = ("tcp", "tcp6", "udp", "udp6")


@dataclasses.dataclass
class TargetCase:
    """One captured case of a target: where its files are and what the client said of itself."""
    target: str
    transport: str
    proc: str
    size: int
    calls: int
    warmup: int
    dir: str
    client_pid: int
    server_pids: list
    program_p50_us: float
    program_calls: int
    program_ok: bool
    program_error: str
    untraced_p50s_us: list = dataclasses.field(default_factory=list)   # the same client with nothing
                                                                         # recorded, before and after
    round: int = 1           # which of the run's rounds (each round captures every case once, in turn)
    rounds: int = 1

    @property
    def id(self):
        return case_id(self.transport, self.proc, self.size, self.round, self.rounds)


def case_id(transport, proc, size, rnd=1, rounds=1):
    """A case's directory name: TRANSPORT-PROC-SIZE, and -rN where the run has several rounds."""
    return f"{transport}-{proc}-{size}" + (f"-r{rnd}" if rounds > 1 else "")


def program_events():
    evs = [f"syscalls:sys_{d}_{s}" for s in SEND_SYSCALLS + RECV_SYSCALLS for d in ("enter", "exit")]
    evs += list(LIFE_EVENTS) + list(WAIT_EXITS) + list(SCHED)
    return [e for e in evs if perf.tracepoint_available(e)]


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise UserError(f"target capture: writing {text.strip()!r} to {path} failed: {e.strerror}") from None


class ProgramRecorder(ftrace.FtraceRecorder):
    """A tracefs instance that records only the pids written to its set_event_pid and their threads
    and children (options/event-fork), with no other filter."""

    def __init__(self, events, name):
        super().__init__(events, devices=(), procnames=("rpcscope-target",), buffer_kb=BUFFER_KB, name=name,
                         events_off_while_paused=True)

    def start(self):
        super().start()
        try:
            for ev in self.events:
                _write(self._event_dir(ev) / "filter", "0")          # the pid list filters instead
            _write(self.path / "options" / "event-fork", "1")
        except BaseException:
            self.stop()
            raise

    @property
    def pid_file(self):
        return self.path / "set_event_pid"


class NetRecorder(ftrace.FtraceRecorder):
    """The device events on the hosts' interfaces, and the switches out of the idle task."""

    def start(self):
        super().start()
        try:
            _write(self._event_dir(IDLE_SWITCH) / "filter", IDLE_SWITCH_FILTER)
        except BaseException:
            self.stop()
            raise


class KernelOnlyRecording:
    """What a kernel-only capture records of one client and its servers: the programs instance (their
    system calls and scheduling, by pid), the net instance (the two hosts' device events and the idle
    task's switches), both with their events off until resume(), and the socket poller.

    `run --target` records each case with one (_one_case). `capture --turns --kernel-only-runs` records
    each of its kernel-only runs with one, resumed only in that run's turns (collectors/sweeps.py), so
    that the untraced build's kernel-only steps and the traced build's tracepoint-based ones come from
    the same moments of the host (analysis/crosscheck.py).

    copies=2 records every event twice: a second pair of instances, made, filtered, resumed and paused
    as the first, whose rings are discarded. Each instance registers its own probe on a tracepoint, so
    every event's recording (ring reserve, clock read, copy, commit) runs twice, while the analysed
    trace is the first pair's, the same as with one copy. How much each interval between two events
    grows is where one more recording of the kernel events lands (capture --kernel-only-doubled-runs)."""

    def __init__(self, devices, extra_events=(), tag=None, copies=1, hops=()):
        tag = tag or f"rpcscope-target-{os.getpid()}"
        self.devices = list(devices)             # [the client host's interface, the server host's]
        events = program_events() + list(extra_events)
        self.progs_all = [ProgramRecorder(events, name=f"{tag}-p" + (f"{i + 1}" if i else ""))
                          for i in range(copies)]
        # The net instance records the hops between the two hosts too (hops: the bridge's side of each
        # host's veth pair): a packet's events there run the instance's probe whether its device filter
        # keeps them or not, so they are recorded, and charged to the interval that holds them.
        self.net_all = [NetRecorder(list(NET) + [IDLE_SWITCH], self.devices + list(hops), buffer_kb=BUFFER_KB,
                                    name=f"{tag}-n" + (f"{i + 1}" if i else ""), record_tgid=False,
                                    events_off_while_paused=True) for i in range(copies)]
        self.progs, self.net = self.progs_all[0], self.net_all[0]     # the analysed pair
        self.poller = SocketPoller()
        self._polling = False

    def _instances(self):
        return self.progs_all + self.net_all

    def start(self):
        """Make every instance, their events off."""
        try:
            for rec in self._instances():
                rec.start()
        except BaseException:
            self.stop()
            raise

    def holder(self):
        """argv prefix that puts a program (and every thread and child it makes) in every programs instance:
        a shell that appends its own pid to each one's set_event_pid, then execs the rest of the argv."""
        files = " && ".join(f"echo $$ >> {rec.pid_file}" for rec in self.progs_all)
        return ["sh", "-c", f'{files} && exec "$@"', "rpcscope-target"]

    def watch(self, pids, client=False):
        """Poll these pids' sockets (the poller starts with the first watch)."""
        if not self._polling:
            self.poller.start()
            self._polling = True
        self.poller.watch(pids, client=client)

    def resume(self):
        for rec in self._instances():
            rec.resume()

    def pause(self):
        for rec in self._instances():
            rec.pause()

    def finish(self, case_dir, client_pid, server_pids):
        """Stop polling; the rings into case_dir/programs and case_dir/net (raw, and decoded as the analysis
        reads them), the sightings and pids into case_dir/sockets.json. Returns the events the rings lost."""
        case_dir = pathlib.Path(case_dir)
        self.poller.stop()
        self.progs.dump(case_dir / "programs")
        self.net.dump(case_dir / "net")
        lost = write_events(case_dir / "programs") + write_events(case_dir / "net")
        rec = self.poller.record()
        rec.update({"client_pid": client_pid, "server_pids": list(server_pids),
                    "devices": {"client": self.devices[0], "server": self.devices[1]}})
        (case_dir / "sockets.json").write_text(json.dumps(rec, indent=1))
        return lost

    def stop(self):
        """Stop polling and remove every instance; idempotent."""
        if self._polling:
            self.poller.stop()
        for rec in self._instances():
            rec.stop()


class TracedServers(systems.Servers):
    """The experiments' servers, each started under the program recorder's holder."""

    def __init__(self, placement, system, workdir, duration_s, holder):
        super().__init__(placement, [system], workdir, duration_s)
        self.holder = holder

    def _ns(self, *argv):
        return self.holder + super()._ns(*argv)


def descendants(root):
    """The pids of root and every process under it (one pass over /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def _addr(hexaddr):
    """'0300A8C6:1C2A' (or an IPv6 one) -> '198.168.0.3:7210'."""
    h, port = hexaddr.split(":")
    if len(h) == 8:
        ip = ".".join(str(b) for b in bytes.fromhex(h)[::-1])
    else:
        words = [bytes.fromhex(h[i:i + 8])[::-1] for i in range(0, 32, 8)]
        raw = b"".join(words)
        ip = ".".join(str(b) for b in raw[12:]) if raw[:12] == b"\0" * 10 + b"\xff\xff" else raw.hex()
    return f"{ip}:{int(port, 16)}"


def socket_table(pid):
    """{inode: (proto, local, remote)} of the network namespace pid lives in."""
    out = {}
    for proto in PROC_NET:
        try:
            lines = pathlib.Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9:
                out[int(f[9])] = (proto.rstrip("6"), _addr(f[1]), _addr(f[2]))
    return out


class SocketPoller:
    """A thread that reads the watched processes' socket fds from /proc until stopped: each (pid, fd,
    inode) sighting once, with the first time it was seen and its 4-tuple.

    It polls fast (POLL_FAST_S) after a watch() only until every watched client has a socket with
    its peer (UDP: any socket) and no new socket has been seen for POLL_QUIET_S, then slowly
    (POLL_SLOW_S): it shares the CPUs with the calls, and a thread woken while the poller runs on its
    CPU waits for it, which would lengthen the very wake-ups the analysis measures. The quiet time
    keeps it fast past a client's first socket (a lookup's) to the sockets it opens next."""

    def __init__(self):
        self.pids = set()
        self.clients = set()
        self.seen = {}                # (pid, fd, inode) -> sighting
        self.tids = {}                # tid -> tgid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._fast_until = 0.0
        self._last_new = 0.0

    def watch(self, pids, fast_s=2.0, client=False):
        """Poll pids too, fast for fast_s; a client's sockets are connected ones, so a TCP socket first
        seen unconnected is looked at again until it has its peer."""
        self.pids |= set(pids)
        if client:
            self.clients |= set(pids)
        self._fast_until = time.monotonic() + fast_s

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        """Stop polling (after one last look); idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.poll_once()

    def settled(self):
        """Whether every watched client has a socket the analysis can pair: TCP with its peer, or UDP."""
        return all(any(k[0] == pid and (v["proto"] != "tcp" or not v["remote"].endswith(":0"))
                       for k, v in self.seen.items()) for pid in self.clients)

    def _run(self):
        while not self._stop.is_set():
            self.poll_once()
            now = time.monotonic()
            fast = now < self._fast_until and not (self.clients and self.settled()
                                                   and now - self._last_new >= POLL_QUIET_S)
            self._stop.wait(POLL_FAST_S if fast else POLL_SLOW_S)

    def poll_once(self):
        for pid in list(self.pids):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
                for t in os.listdir(f"/proc/{pid}/task"):
                    self.tids[int(t)] = pid
            except OSError:
                continue
            new = []
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                # The time of a sighting is taken when its readlink has returned: the fd held that socket
                # then, even where the poller was preempted since it listed the fds and the fd was closed
                # and opened again meanwhile (the analysis gives a sighting to the fd's span at its time).
                seen = time.monotonic_ns()
                m = re.fullmatch(r"socket:\[(\d+)\]", link)
                if m and (pid, int(fd), int(m.group(1))) not in self.seen:
                    new.append((int(fd), int(m.group(1)), seen))
            # A TCP socket seen between its socket() and connect() is looked at again until it has a peer.
            early = [k for k, v in self.seen.items() if k[0] == pid and v["proto"] == "tcp"
                     and v["remote"].endswith(":0")] if pid in self.clients else []
            if not new and not early:
                continue
            table = socket_table(pid)
            for fd, ino, seen in new:
                if ino in table:
                    proto, local, remote = table[ino]
                    self._last_new = time.monotonic()
                    self.seen[(pid, fd, ino)] = {"pid": pid, "fd": fd, "inode": ino, "proto": proto,
                                                 "local": local, "remote": remote, "seen_ns": seen}
            for key in early:
                if key[2] in table:
                    _proto, self.seen[key]["local"], self.seen[key]["remote"] = table[key[2]]
                    self._last_new = time.monotonic()

    def record(self):
        return {"sockets": sorted(self.seen.values(), key=lambda s: s["seen_ns"]),
                "tids": {str(t): p for t, p in self.tids.items()}}


def client_argv(system, placement, transport, proc, size, calls, warmup, max_seconds):
    """The experiments' client command line for one run (rpcscope/experiments/systems.py run_client)."""
    cpus = str(placement.client_cpu)
    base = ["ip", "netns", "exec", placement.client_ns, "taskset", "-c", cpus]
    common = ["--server", placement.server_addr, "--transport", transport, "--proc", proc, "--size", str(size),
              "--calls", str(calls), "--warmup", str(warmup), "--threads", "1", "--cpu", cpus,
              "--max-seconds", f"{max_seconds:g}", "--json"]
    if system == "rpcscope":
        return base + ["setarch", "-R", str(systems.NOTRACE_BIN / "rpc-client"), "--port",
                       str(systems.PORTS["rpcscope"]), "--hist-bin-ns", "0", *common]
    if system == "tirpc":
        return base + [str(systems.PEERS_BIN / "tirpc-client"), *common]
    return base + [str(systems.PEERS_BIN / "grpc-client"), "--port", str(systems.PORTS["grpc"]), *common]


def capture(target, pairs, proc, calls, warmup, out_dir, max_seconds=30.0, placement="split", say=print,
            uprobes=(), rounds=1):
    """Capture every (transport, size) case of pairs of a target into out_dir/cases/ID; the TargetCases.
    uprobes: --uprobe specs (SYMBOL[:STEP]), probed at entry and return in every case. rounds: each case
    is captured this many times, every case once a round, so that the sizes share the host's moments
    (its speed drifts between cases: analysis/TARGET.md)."""
    if target not in TARGETS:
        raise UserError(f"--target {target!r}: use one of {', '.join(TARGETS)}")
    system = TARGETS[target]
    for t, s in pairs:
        why = systems.supports(system, t, proc, s)
        if why:
            raise UserError(f"{target} {t} {proc} {s}: {why}")
    ftrace.require()
    pl = systems.testbed_placement(placement)
    hosts = {h["role"]: h for h in systems.testbed.load_state()["hosts"]}
    devices = [hosts["client"]["ifname"], hosts["server"]["ifname"]]
    hops = [hosts[role]["peer_ifname"] for role in ("client", "server")]
    out_dir = pathlib.Path(out_dir)
    cases = []
    idle = IdlePolicy("poll")
    idle.check()
    probes = resolve(list(uprobes), PROGRAMS[system])
    with idle, Uprobes(probes) as up:
        for r in range(1, rounds + 1):
            for t, s in pairs:
                case_dir = out_dir / "cases" / case_id(t, proc, s, r, rounds)
                case_dir.mkdir(parents=True, exist_ok=True)
                say(f"  {target} {t} {proc} {s} B" + (f", round {r} of {rounds}" if rounds > 1 else "")
                    + f": {warmup} + {calls} calls, kernel events only"
                    + (f" and {len(probes)} uprobe(s)" if probes else ""))
                (case_dir / "uprobes.json").write_text(json.dumps(up.record(), indent=1))
                tc = _one_case(target, system, pl, (devices, hops), t, proc, s, calls, warmup, case_dir,
                               max_seconds, up.events, (r, rounds))
                cases.append(tc)
    return cases


def _one_case(target, system, pl, devices, transport, proc, size, calls, warmup, case_dir, max_seconds, extra=(),
              rnd=(1, 1)):
    """One case of a target run; devices: ([the client's interface, the server's], the hops between them)."""
    rec = KernelOnlyRecording(devices[0], extra, hops=devices[1])
    client = None
    untraced = []
    argv = client_argv(system, pl, transport, proc, size, calls, warmup, max_seconds)
    timeout = max_seconds + warmup * 0.01 + 60
    try:
        rec.start()                              # the events stay off until the traced run (resume)
        with TracedServers(pl, system, case_dir, max_seconds + 30, rec.holder()) as servers:
            server_pids = []
            for p in servers.procs.values():
                server_pids += descendants(p.pid)
            # The same client with nothing recorded, before and after the traced run: what the
            # recorded events cost the program's RTT (analysis/kernelonly.py calibrates on it).
            untraced.append(_untraced_run(argv, timeout, target, case_dir, 1))
            rec.watch(server_pids)
            rec.resume()
            client = subprocess.Popen(rec.holder() + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, stdin=subprocess.DEVNULL)
            rec.watch([client.pid], client=True)
            try:
                out, err = client.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                client.kill()
                client.communicate()
                raise UserError(f"the {target} client did not finish in {max_seconds:g} s") from None
            rec.pause()
            rec.poller.stop()
            untraced.append(_untraced_run(argv, timeout, target, case_dir, 2))
            servers.check_alive(system, transport)
        lost = rec.finish(case_dir, client.pid, server_pids)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        rec.stop()
    try:
        d = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UserError(f"the {target} client failed (exit {client.returncode}): {(err or out).strip()[-300:]}") \
            from None
    (case_dir / "program.json").write_text(json.dumps(d, indent=1))
    want = calls
    ok = client.returncode == 0 and not d.get("errors") and not d.get("mismatches") and d.get("calls") == want
    tc = TargetCase(target=target, transport=transport, proc=proc, size=size, calls=calls, warmup=warmup,
                    dir=str(case_dir), client_pid=client.pid, server_pids=server_pids,
                    program_p50_us=d.get("rtt_ns", {}).get("p50", 0) / 1e3, program_calls=int(d.get("calls", 0)),
                    program_ok=ok, program_error=d.get("first_error") or ("" if ok else err.strip()[-200:]),
                    untraced_p50s_us=untraced, round=rnd[0], rounds=rnd[1])
    if lost:
        print(f"  WARNING: the trace lost {lost} events ({case_dir}); calls around the gaps may not match")
    (case_dir / TARGET_CASE_JSON).write_text(json.dumps(dataclasses.asdict(tc), indent=1))
    return tc


def _untraced_run(argv, timeout, target, case_dir, n):
    """One run of the client with nothing recorded: its report kept as program-untraced-N.json; its p50
    (us). A failed run fails the case: the traced run's calibration would lack it."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"the {target} client's untraced run {n} did not finish in {timeout:g} s") from None
    try:
        d = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        d = {}
    p50 = (d.get("rtt_ns") or {}).get("p50")
    if p.returncode != 0 or d.get("errors") or d.get("mismatches") or not p50:
        raise UserError(f"the {target} client's untraced run {n} failed (exit {p.returncode}): "
                        f"{(d.get('first_error') or p.stderr or p.stdout).strip()[-300:]}")
    (pathlib.Path(case_dir) / f"program-untraced-{n}.json").write_text(json.dumps(d, indent=1))
    return p50 / 1e3


def _decoder(fields):
    parts = []
    for name, kind, off, size, signed in fields:
        if kind == "int":
            code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
            parts.append((name, "int", off, "<" + (code if signed else code.upper())))
        else:
            parts.append((name, kind, off, size))

    def dec(d):
        out = {}
        for p in parts:
            if p[1] == "int":
                out[p[0]] = struct.unpack_from(p[3], d, p[2])[0]
            elif p[1] == "str":
                out[p[0]] = d[p[2]:p[2] + p[3]].split(b"\0", 1)[0].decode(errors="replace")
            else:
                loc = struct.unpack_from("<I", d, p[2])[0]
                out[p[0]] = d[loc & 0xFFFF:(loc & 0xFFFF) + (loc >> 16)].split(b"\0", 1)[0].decode(errors="replace")
        return out
    return dec


def read_dump(raw_dir):
    """[(ts, event, tid, fields)] of one FtraceRecorder dump, in time order, and the events lost. Each
    event's fields hold the CPU that recorded it (TARGET_EVENT_CPU)."""
    raw_dir = pathlib.Path(raw_dir)
    try:
        formats = json.loads((raw_dir / "formats.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{raw_dir}: no complete tracefs dump ({e}); capture the case again") from None
    by_id = {f["id"]: (name, _decoder(f["fields"])) for name, f in formats.items()}
    out, lost = [], 0
    for raw in sorted(raw_dir.glob("cpu*.raw")):
        cpu = int(raw.stem[3:])
        events, n_lost, _ = ftrace.parse_cpu(raw.read_bytes(), by_id)
        lost += n_lost
        for ts, etype, d in events:
            name, dec = by_id[etype]
            out.append((ts, name, struct.unpack_from("<i", d, 4)[0], {**dec(d), TARGET_EVENT_CPU: cpu}))
    out.sort(key=lambda e: e[0])
    return out, lost


def write_events(raw_dir):
    """The dump's events decoded, one JSON array a line, into raw_dir/TARGET_EVENTS (what the analysis
    reads); the events the ring lost."""
    events, lost = read_dump(raw_dir)
    with gzip.open(pathlib.Path(raw_dir) / TARGET_EVENTS, "wt", compresslevel=3) as f:
        for e in events:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
    return lost


def target_record(target, proc, calls, warmup, rounds, cases, uprobes=(), left_out=(), made_by=None):
    """A target run's target.json (TARGET_FORMAT): what was run, and every case captured."""
    doc = {"format": TARGET_FORMAT, "target": target, "proc": proc, "calls": calls, "warmup": warmup,
           "rounds": rounds, "uprobes": list(uprobes), "left_out": list(left_out),
           "cases": [dataclasses.asdict(c) for c in cases]}
    if made_by:
        doc["made_by"] = made_by
    return doc


def load_case(case_dir):
    try:
        return TargetCase(**json.loads((pathlib.Path(case_dir) / TARGET_CASE_JSON).read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"{case_dir}: no target case record ({e}); capture it again with rpcscope run --target")\
            from None
