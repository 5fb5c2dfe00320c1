"""Process control for the capture and the benchmarks: the RPC programs of each build, started in the
testbed's namespaces on chosen CPUs (RpcRuns: a server and a held client, released together), the
processes tracked by pid and stopped by pid (Processes), the root lttng-sessiond (Sessiond), the
project's own measuring tools (tool_json), and counts read back (bt_count, dir_bytes, ipi_counts).
"""
import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

from rpcscope.output import UserError

from . import leftovers
from .options import CLOCK_BIN, NOTRACE_BIN, PACE_SLICES, SERVER_SAFETY_S, TRACE_BIN, TURN_CALLS


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
    in the probe correction (`rpcscope bench layout`: less spread between runs with the host steady,
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



def read_text(path, default=None):
    try:
        return pathlib.Path(path).read_text().strip()
    except OSError:
        return default



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
    st = read_text(f"/proc/{pid}/stat", "")
    try:
        return int(st.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    st = read_text(f"/proc/{pid}/stat", "")
    return bool(st) and st.rsplit(")", 1)[1].split()[0] != "Z"



def tool_json(argv, timeout):
    """The JSON one of the project's own measuring tools (rpc-wakecal, rpc-cpuspeed) printed. Raises
    OSError (it could not start), subprocess.TimeoutExpired, or ValueError: it exited non-zero (the
    last 300 characters of its message) or printed no JSON."""
    cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise ValueError((cp.stderr.strip() or f"exit {cp.returncode}")[-300:])
    return json.loads(cp.stdout)



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


# ---------------------------------------------------------------- a server and a client of one run

class RpcRuns:
    """A server and a client of one run, for the Capture: it holds p (the parameters), procs
    (Processes), cpus, manifest, and ns(role), addr(role), next_port(), server_wait(transport)."""

    def start_server(self, ns, bind, port, transport, cpu, traced, log_dir, tag, wait, clock_out=None,
                     clock_ring=False, prefix=()):
        """prefix: argv before the server's own (a kernel-only run's holder, collectors/target.py)."""
        bindir = rpc_bindir(traced, clock_out)
        ready = log_dir / f"server-{tag}.ready"
        ready.unlink(missing_ok=True)
        argv = [*prefix, "ip", "netns", "exec", ns, *aslr_prefix(self.p.get("aslr", "off")), "taskset", "-c", str(cpu),
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
            log = read_text(log_dir / f"server-{tag}.log", "")[-400:]
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
        grows with them, for it runs one turn in that many, and its turns are taker.every times --turn-calls."""
        bindir = rpc_bindir(traced, clock_out)
        max_s = max(30, int(calls * 0.005) + 30) * (turns[1] if turns else 1)
        turn_argv = ["--turn-fds", ",".join(map(str, turns[0].child_fds())),
                     "--turn-calls", str(self.p.get("turn_calls", TURN_CALLS) * turns[0].every)] if turns else []
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

