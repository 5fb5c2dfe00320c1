"""The systems an experiment compares, on the local testbed: their servers on the server host, one
client run on the client host, and that run's checked result.

    rpcscope   the reference RPC, untraced build (build/notrace/bin: rpc-server, rpc-client)
    tirpc      ONC RPC through libtirpc, rpcgen stubs; tirpc-serve starts rpcbind beside the server
    grpc       gRPC C++ unary calls over TCP
    sockperf   sockperf's ping-pong (sr / pp --full-rtt): a message and its echo, the floor; N
               threads are N sockperf pp processes at once, their messages per second summed

Every server is bounded in time (its own --duration, or `timeout` for sockperf) and stopped when the
experiment ends, however it ends; every client run is bounded in calls and in seconds.
"""
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

from .. import ROOT, testbed
from ..output import UserError

NOTRACE_BIN = ROOT / "build" / "notrace" / "bin"
PEERS_BIN = ROOT / "build" / "peers" / "bin"
# Ports on the server host (tirpc's come from rpcbind). Below the capture's (collectors/capture.py 7300+).
PORTS = {"rpcscope": 7210, "grpc": 7220, "sockperf-udp": 7230, "sockperf-tcp": 7231}
SYSTEMS = ("rpcscope", "tirpc", "grpc", "sockperf")
TRANSPORTS = {"rpcscope": ("udp", "tcp"), "tirpc": ("udp", "tcp"), "grpc": ("tcp",), "sockperf": ("udp", "tcp")}
PEER_PROCS = ("null", "add", "sum", "concat", "echo", "maxarg", "maxresult")
# libtirpc's UDP message limit (UDPMSGSIZE): larger arguments cannot be encoded over UDP.
TIRPC_UDP_MAX = 8800 - 100
SOCKPERF_MIN_MSG = 14
SERVER_START_S = 15.0


@dataclasses.dataclass
class Placement:
    """Where the client and the server run: the testbed's hosts and one CPU each."""
    name: str                 # "split": each its own CPU; "one": both on one CPU
    client_ns: str
    server_ns: str
    server_addr: str
    client_cpu: int
    server_cpu: int

    def describe(self):
        where = (f"client CPU {self.client_cpu}, server CPU {self.server_cpu}" if self.name == "split"
                 else f"client and server both on CPU {self.client_cpu}")
        return f"{where}; client host {self.client_ns}, server host {self.server_ns} ({self.server_addr})"


@dataclasses.dataclass
class Result:
    """One client run: its checked calls and their round-trip times (us)."""
    system: str
    transport: str
    proc: str
    size: int
    threads: int
    calls: int
    errors: int
    mismatches: int
    min_us: float
    p50_us: float
    mean_us: float
    p90_us: float
    p99_us: float
    max_us: float
    calls_per_s: float
    first_call_us: float
    ok: bool
    error: str


def testbed_placement(name):
    """The local testbed's hosts with a placement, after the checks an experiment needs (root, the
    testbed up and healthy, the tools and the builds); UserError naming what is missing."""
    if os.geteuid() != 0:
        raise UserError("experiments run processes in the testbed's network namespaces, which needs root")
    st = testbed.load_state()
    if not st or testbed.health(st):
        raise UserError("the local testbed is down or unhealthy: start it with `rpcscope testbed up` "
                        "(then `rpcscope experiment ...` again)")
    for tool, fix in (("ip", "install iproute2"), ("taskset", "install util-linux"), ("setarch", "install util-linux"),
                      ("timeout", "install coreutils"), ("sockperf", "run `make bootstrap`"),
                      ("unshare", "install util-linux")):
        if not shutil.which(tool):
            raise UserError(f"'{tool}' was not found on PATH: {fix}")
    if not (NOTRACE_BIN / "rpc-client").exists():
        raise UserError(f"{NOTRACE_BIN}/rpc-client is missing: run `make TRACE=0`")
    for prog in ("tirpc-serve", "tirpc-server", "tirpc-client", "grpc-server", "grpc-client"):
        if not (PEERS_BIN / prog).exists():
            raise UserError(f"{PEERS_BIN}/{prog} is missing: run `make peers`")
    hosts = {h["role"]: h for h in st["hosts"]}
    cpus = sorted(os.sched_getaffinity(0))
    if name == "split" and len(cpus) < 2:
        raise UserError("placement split needs two CPUs; this machine gives rpcscope one")
    return Placement(name=name, client_ns=hosts["client"]["name"], server_ns=hosts["server"]["name"],
                     server_addr=hosts["server"]["address"], client_cpu=cpus[0],
                     server_cpu=cpus[1] if name == "split" else cpus[0])


def supports(system, transport, proc, size):
    """None if the system can run this call, else why not (a table's n/a)."""
    if transport not in TRANSPORTS[system]:
        return f"{system} has no {transport.upper()}"
    if system == "sockperf":
        return None if proc in ("null", "echo", "maxarg", "maxresult", "add", "sum", "concat") else "no procedures"
    if system != "rpcscope" and proc not in PEER_PROCS:
        return f"{proc} is the reference RPC's only"
    if system == "tirpc" and transport == "udp" and wire_bytes(proc, size) > TIRPC_UDP_MAX:
        return "over libtirpc's 8800-byte UDP message limit"
    return None


def wire_bytes(proc, size):
    """The argument's bytes (what sockperf sends as its message for this call)."""
    return size * 4 if proc == "sum" else (8 if proc == "add" else size)


# ---------------------------------------------------------------- servers

class Servers:
    """The servers of some systems on the testbed's server host, for the life of a `with` block."""

    def __init__(self, placement, systems, workdir, duration_s, executors=0):
        self.p, self.systems, self.dir = placement, systems, pathlib.Path(workdir)
        self.duration = max(30, int(duration_s))
        self.executors = executors
        self.procs = {}

    def __enter__(self):
        try:
            for s in self.systems:
                self._start(s)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _ns(self, *argv):
        return ["ip", "netns", "exec", self.p.server_ns, "taskset", "-c", str(self.p.server_cpu), *argv]

    def _start(self, system):
        cpu, addr = str(self.p.server_cpu), self.p.server_addr
        ready = self.dir / f"{system}.ready"
        ready.unlink(missing_ok=True)
        if system == "rpcscope":
            argv = self._ns("setarch", "-R", str(NOTRACE_BIN / "rpc-server"), "--bind", addr,
                            "--port", str(PORTS["rpcscope"]), "--transport", "both", "--cpu", cpu,
                            "--executors", str(self.executors), "--duration", str(self.duration),
                            "--ready-file", str(ready))
            self._launch(system, argv, ready)
        elif system == "tirpc":
            argv = self._ns(str(PEERS_BIN / "tirpc-serve"), "--cpu", cpu, "--duration", str(self.duration),
                            "--ready-file", str(ready))
            self._launch(system, argv, ready)
        elif system == "grpc":
            argv = self._ns(str(PEERS_BIN / "grpc-server"), "--bind", addr, "--port", str(PORTS["grpc"]),
                            "--cpu", cpu, "--duration", str(self.duration), "--ready-file", str(ready))
            self._launch(system, argv, ready)
        elif system == "sockperf":
            for t in ("udp", "tcp"):
                argv = self._ns("timeout", str(self.duration), "sockperf", "sr", "-i", addr,
                                "-p", str(PORTS[f"sockperf-{t}"]), *(["--tcp"] if t == "tcp" else []))
                self._launch(f"sockperf-{t}", argv, None)
        else:
            raise UserError(f"unknown system {system!r}")

    def _launch(self, name, argv, ready):
        log = open(self.dir / f"{name}.log", "wb")
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self.procs[name] = proc
        if ready is None:                  # sockperf writes no ready file: it listens within a moment
            time.sleep(0.3)
            if proc.poll() is not None:
                raise UserError(f"{name} server exited at once: {self.log_tail(name)}")
            return
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline and proc.poll() is None and not ready.exists():
            time.sleep(0.02)
        if not ready.exists():
            raise UserError(f"the {name} server did not start on {self.p.server_ns}: {self.log_tail(name)}")

    def log_tail(self, name):
        try:
            text = (self.dir / f"{name}.log").read_text(errors="replace").strip()
        except OSError:
            text = ""
        return text.splitlines()[-1][-300:] if text else "no output"

    def check_alive(self, system, transport):
        name = f"sockperf-{transport}" if system == "sockperf" else system
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            raise UserError(f"the {name} server is not running (it ended: {self.log_tail(name)})")

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs = {}


# ---------------------------------------------------------------- one client run

def run_client(servers, system, transport, proc, size, calls, warmup, threads=1, max_seconds=30.0,
               sockperf_seconds=1.0, wait="select"):
    """One client run on the client host: a Result (ok False, with the error, if a call failed or a
    result did not check)."""
    p = servers.p
    servers.check_alive(system, transport)
    cpus = str(p.client_cpu)
    base = ["ip", "netns", "exec", p.client_ns, "taskset", "-c", cpus]
    common = ["--server", p.server_addr, "--transport", transport, "--proc", proc, "--size", str(size),
              "--calls", str(calls), "--warmup", str(warmup), "--threads", str(threads), "--cpu", cpus,
              "--max-seconds", f"{max_seconds:g}", "--json"]
    if system == "sockperf":
        return _sockperf(base, p, transport, proc, size, sockperf_seconds, clients=threads)
    if system == "rpcscope":
        argv = base + ["setarch", "-R", str(NOTRACE_BIN / "rpc-client"), "--port", str(PORTS["rpcscope"]),
                       "--wait", wait, "--hist-bin-ns", "0", *common]
    elif system == "tirpc":
        argv = base + [str(PEERS_BIN / "tirpc-client"), *common]
    else:
        argv = base + [str(PEERS_BIN / "grpc-client"), "--port", str(PORTS["grpc"]), *common]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=max_seconds + warmup * 0.01 + 60)
    except subprocess.TimeoutExpired:
        return _failed(system, transport, proc, size, threads, f"{system} client did not finish in time")
    try:
        d = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return _failed(system, transport, proc, size, threads,
                       f"{system} client failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}")
    want = calls * threads
    err = d.get("first_error") or ""
    ok = (r.returncode == 0 and not d.get("errors") and not d.get("mismatches") and d.get("calls") == want)
    if not ok and not err:
        err = f"exit {r.returncode}, {d.get('calls')} of {want} calls; {r.stderr.strip()[-200:]}"
    rtt = d.get("rtt_ns", {})
    return Result(system=system, transport=transport, proc=proc, size=size, threads=threads,
                  calls=int(d.get("calls", 0)), errors=int(d.get("errors", 0)),
                  mismatches=int(d.get("mismatches", 0)), min_us=rtt.get("min", 0) / 1e3,
                  p50_us=rtt.get("p50", 0) / 1e3, mean_us=rtt.get("mean", 0) / 1e3, p90_us=rtt.get("p90", 0) / 1e3,
                  p99_us=rtt.get("p99", 0) / 1e3, max_us=rtt.get("max", 0) / 1e3,
                  calls_per_s=float(d.get("calls_per_s", 0)), first_call_us=d.get("first_call_ns", 0) / 1e3,
                  ok=ok, error=err)


def _failed(system, transport, proc, size, threads, error):
    return Result(system=system, transport=transport, proc=proc, size=size, threads=threads, calls=0, errors=1,
                  mismatches=0, min_us=0, p50_us=0, mean_us=0, p90_us=0, p99_us=0, max_us=0, calls_per_s=0,
                  first_call_us=0, ok=False, error=error)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _sockperf(base, p, transport, proc, size, seconds, clients=1):
    """sockperf ping-pong with a message of the call's argument bytes, from `clients` sockperf
    processes at once (each one ping-pong client, as each of the RPC client's threads makes one call
    at a time): their messages per second summed, the median of their p50s, and their own checks (no
    message dropped, duplicated or out of order) as the result's."""
    msg = max(SOCKPERF_MIN_MSG, wire_bytes(proc, size))
    argv = base + ["sockperf", "pp", "-i", p.server_addr, "-p", str(PORTS[f"sockperf-{transport}"]),
                   *(["--tcp"] if transport == "tcp" else []), "-m", str(msg), "-t", f"{max(1, round(seconds))}",
                   "--full-rtt"]
    procs = []
    try:
        for _ in range(clients):
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [(pr.communicate(timeout=seconds + 30)[0], pr.returncode) for pr in procs]
    except subprocess.TimeoutExpired:
        return _failed("sockperf", transport, proc, size, clients, "sockperf pp did not finish in time")
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait(timeout=10)
    runs = [_sockperf_parse(out, rc) for out, rc in outs]
    failed = [r for r in runs if isinstance(r, str)]
    if failed:
        return _failed("sockperf", transport, proc, size, clients, failed[0])
    got, lost, sent = (sum(r[k] for r in runs) for k in ("got", "lost", "sent"))
    ok = lost == 0 and all(r["got"] > 0 for r in runs)
    p50s = sorted(r["p50"] for r in runs)
    return Result(system="sockperf", transport=transport, proc=proc, size=size, threads=clients, calls=got,
                  errors=lost, mismatches=0, min_us=min(r["min"] for r in runs), p50_us=p50s[len(p50s) // 2],
                  mean_us=sum(r["mean"] * r["got"] for r in runs) / got if got else 0,
                  p90_us=max(r["p90"] for r in runs), p99_us=max(r["p99"] for r in runs),
                  max_us=max(r["max"] for r in runs), calls_per_s=sum(r["rate"] for r in runs),
                  first_call_us=0, ok=ok,
                  error="" if ok else f"{lost} messages dropped, duplicated or out of order of {sent}")


def _sockperf_parse(out, returncode):
    """One sockperf pp run's figures (a dict), or why it failed (a string)."""
    out = ANSI.sub("", out)
    valid = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)", out)
    bad = re.search(r"dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)", out)
    pct = {k: float(v) for k, v in re.findall(r"percentile (\d+\.\d+) =\s*([0-9.]+)", out)}
    lo = re.search(r"<MIN> observation =\s*([0-9.]+)", out)
    hi = re.search(r"<MAX> observation =\s*([0-9.]+)", out)
    avg = re.search(r"Round trip is ([0-9.]+) usec", out)
    if returncode or not (valid and bad and avg and "50.000" in pct):
        tail = out.strip().splitlines()[-1:] or ["no output"]
        return f"sockperf pp failed (exit {returncode}): {tail[0]}"
    run_s, sent, got = float(valid.group(1)), int(valid.group(2)), int(valid.group(3))
    return {"got": got, "sent": sent, "lost": sum(int(x) for x in bad.groups()), "rate": got / run_s if run_s else 0,
            "p50": pct["50.000"], "p90": pct.get("90.000", 0), "p99": pct.get("99.000", 0),
            "min": float(lo.group(1)) if lo else 0, "max": float(hi.group(1)) if hi else 0,
            "mean": float(avg.group(1))}
