"""Shared fixtures and helpers for tests that drive the reference RPC (rpc/).

    rpc_bin(name, trace=True)  path of build/{trace,notrace}/bin/<name>, made if missing or stale
    rpc_server(...)            factory fixture: start an rpc-server on a free 127.0.0.1 port;
                               every server it started is killed at teardown, even if the test failed
    rpc_server_module(...)     the same factory, one per test module (servers shared by many tests)
    rpc_client(server, ...)    run rpc-client --json against a server and return a ClientRun
    rpc_free_port()            a 127.0.0.1 port free for both TCP and UDP
    signal_when_ready(...)     wait until a long command is at a chosen point, then signal it

The fixtures rpc_bin, rpc_client, rpc_free_port and signal_when_ready hand out the plain functions of the same
names defined here, so test files need not import conftest.

Safety: every server gets --bind 127.0.0.1, a free port, --ready-file and --duration (so a
server that outlives a crashed test run still exits on its own); every subprocess run has a
timeout. Nothing here talks to anything but 127.0.0.1.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
MAKE_TIMEOUT_S = 600
SERVER_SAFETY_DURATION_S = 300.0  # a server left behind exits on its own after this long
READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


# ------------------------------------------------------------------ binaries

_BUILDS = {True: ("trace", []), False: ("notrace", ["TRACE=0"]), "clock": ("clock", ["TRACE=clock"])}


def _make(trace) -> None:
    """Run make for one build flavour (True: trace, False: notrace, "clock"), serialised across
    processes by a lock file."""
    lock_path = REPO / "build" / ".pytest-make.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    args = ["make", "-C", str(REPO)] + _BUILDS[trace][1]
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cp = subprocess.run(args, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if cp.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({cp.returncode}):\n{cp.stdout[-4000:]}\n{cp.stderr[-4000:]}")


_fresh: set[Path] = set()  # binaries already checked in this session


def _sources_mtime() -> float:
    srcs = [*REPO.glob("rpc/*.[ch]"), REPO / "build" / "gen" / "rpcscope_tp.h"]
    return max(p.stat().st_mtime for p in srcs if p.exists())


def rpc_bin(name: str, trace=True) -> Path:
    """Path of a reference RPC program (rpc-server, rpc-client) of a build (trace: True, False for
    TRACE=0, "clock" for TRACE=clock). Runs make if it is missing or, checked once per session, older
    than rpc/*.[ch] (so the tests never run a stale binary)."""
    path = REPO / "build" / _BUILDS[trace][0] / "bin" / name
    if path not in _fresh:
        if not path.exists() or path.stat().st_mtime < _sources_mtime():
            _make(trace)
        _fresh.add(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is still missing after make")
    return path


@pytest.fixture(scope="session", name="rpc_bin")
def rpc_bin_fixture():
    """The rpc_bin(name, trace=True) function, for test files that prefer fixtures to imports."""
    return rpc_bin


# ------------------------------------------------------------------ ports

def free_port(attempts: int = 50) -> int:
    """A 127.0.0.1 port that is free for both TCP and UDP right now."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind((LOOPBACK, 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind((LOOPBACK, port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port free for both TCP and UDP")


# ------------------------------------------------------------------ statistics

_STAT_LINE = re.compile(r"^\s+([a-z_]+)\s+(\d+)\s*$")
_STATS_HEADER = "rpc-server statistics:"
_LAST_STAT = "dropped_by_test_option"  # the last counter server_print_stats writes


def parse_stats_text(text: str) -> list[dict[str, int]]:
    """Every complete statistics block in rpc-server's stderr, oldest first."""
    blocks = []
    for chunk in text.split(_STATS_HEADER)[1:]:
        st = {}
        for line in chunk.splitlines():
            m = _STAT_LINE.match(line)
            if m:
                st[m.group(1)] = int(m.group(2))
        if _LAST_STAT in st:
            blocks.append(st)
    return blocks


def rss_kib(pid: int) -> int | None:
    """VmRSS of a process in KiB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def udp_socket_info(port: int, addr: str = LOOPBACK) -> dict[str, int] | None:
    """rx_queue (bytes waiting) and drops (datagrams the kernel dropped) of the UDP socket bound to addr:port."""
    want = "%08X:%04X" % (int.from_bytes(socket.inet_aton(addr), "little"), port)
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[1] == want:
                return {"rx_queue": int(cols[4].split(":")[1], 16), "drops": int(cols[12])}
    return None


# ------------------------------------------------------------------ the server

@dataclass
class RpcServer:
    popen: subprocess.Popen
    port: int
    args: list[str]
    stderr_path: Path
    stdout_path: Path
    stats_path: Path
    ready_path: Path
    final_stats: dict | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_kib(self) -> int | None:
        return rss_kib(self.pid) if self.alive() else None

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stats(self, timeout: float = 5.0) -> dict[str, int]:
        """Live counters: SIGUSR1, then the new block the listener prints on stderr."""
        assert self.alive(), f"rpc-server exited ({self.popen.returncode}):\n{self.stderr_text()[-3000:]}"
        start = self.stderr_path.stat().st_size
        self.popen.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.stderr_path, "rb") as f:
                f.seek(start)
                blocks = parse_stats_text(f.read().decode(errors="replace"))
            if blocks:
                return blocks[-1]
            assert self.alive(), f"rpc-server exited ({self.popen.returncode}):\n{self.stderr_text()[-3000:]}"
            time.sleep(0.005)
        raise TimeoutError(f"rpc-server did not print statistics within {timeout} s after SIGUSR1")

    def udp_socket(self) -> dict[str, int] | None:
        """The server's UDP socket as /proc/net/udp shows it: rx_queue bytes and kernel drops."""
        return udp_socket_info(self.port)

    def wait_stats(self, predicate, timeout: float = 5.0) -> dict[str, int]:
        """Poll the live counters until predicate(stats) holds (or the timeout; returns the last)."""
        deadline = time.monotonic() + timeout
        st = self.stats()
        while not predicate(st) and time.monotonic() < deadline:
            time.sleep(0.02)
            st = self.stats()
        return st

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """SIGTERM, wait for a clean exit, and return the --stats-json counters."""
        if self.final_stats is not None:
            return self.final_stats
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"rpc-server (pid {self.pid}) ignored SIGTERM for {timeout} s")
        assert rc == 0, f"rpc-server exited with {rc}:\n{self.stderr_text()[-3000:]}"
        self.final_stats = json.loads(self.stats_path.read_text())
        return self.final_stats

    def kill(self) -> None:
        """Teardown: terminate, then kill, this server only (by its own pid)."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)


class ServerFactory:
    """Starts rpc-servers and remembers them so that close() can kill every one."""

    _ids = itertools.count()

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.servers: list[RpcServer] = []

    def __call__(self, *, transport: str = "both", executors: int = 2, extra=(), trace=True,
                 duration: float = SERVER_SAFETY_DURATION_S, env: dict | None = None) -> RpcServer:
        binary = rpc_bin("rpc-server", trace)
        last_err = ""
        for _attempt in range(5):
            n = next(self._ids)
            port = free_port()
            ready = self.workdir / f"server{n}.ready"
            stats = self.workdir / f"server{n}.stats.json"
            out_path = self.workdir / f"server{n}.stdout"
            err_path = self.workdir / f"server{n}.stderr"
            args = [str(binary), "--bind", LOOPBACK, "--port", str(port), "--transport", transport,
                    "--executors", str(executors), "--ready-file", str(ready), "--duration", str(duration),
                    "--stats-json", str(stats), *map(str, extra)]
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         env={**os.environ, **(env or {})})
            srv = RpcServer(popen, port, args, err_path, out_path, stats, ready)
            self.servers.append(srv)
            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline and popen.poll() is None and not ready.exists():
                time.sleep(0.01)
            if ready.exists():
                pid, ready_port = ready.read_text().split()
                assert int(pid) == popen.pid and int(ready_port) == port, ready.read_text()
                return srv
            if popen.poll() is None:
                srv.kill()
                raise AssertionError(f"rpc-server not ready within {READY_TIMEOUT_S} s: {' '.join(args)}")
            last_err = srv.stderr_text()
            if "in use" not in last_err:  # lost a race for the port: try another; anything else is a failure
                break
        raise AssertionError(f"rpc-server failed to start ({popen.returncode}): {' '.join(args)}\n{last_err}")

    def close(self) -> None:
        for srv in self.servers:
            srv.kill()


@pytest.fixture
def rpc_server(tmp_path):
    """Factory: rpc_server(transport="udp", executors=0, extra=[...]) -> RpcServer (killed at teardown)."""
    factory = ServerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def rpc_server_module(tmp_path_factory):
    """The rpc_server factory with module lifetime, for servers shared by many tests."""
    factory = ServerFactory(tmp_path_factory.mktemp("rpc-servers"))
    try:
        yield factory
    finally:
        factory.close()


# ------------------------------------------------------------------ the client

@dataclass
class ClientRun:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    result: dict = field(default_factory=dict)  # the --json object ({} if none was printed)

    def describe(self) -> str:
        return (f"$ {' '.join(self.args)}\nexit {self.returncode}\n"
                f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}")

    def assert_ok(self, calls: int) -> dict:
        """Exit 0, exactly `calls` measured calls, no errors, no wrong results."""
        r = self.result
        assert self.returncode == 0, self.describe()
        assert r, self.describe()
        assert (r["calls"], r["errors"], r["mismatches"]) == (calls, 0, 0), self.describe()
        return r


def run_client(server, *, transport: str = "udp", proc: str = "null", size: int = 0, calls: int = 100,
               warmup: int = 10, extra=(), trace: bool = True, timeout: float = 120.0) -> ClientRun:
    """Run rpc-client --json (which checks every result itself) with a hard timeout.
    server: an RpcServer or a port number."""
    port = server.port if isinstance(server, RpcServer) else int(server)
    args = [str(rpc_bin("rpc-client", trace)), "--server", LOOPBACK, "--port", str(port), "--transport", transport,
            "--proc", proc, "--size", str(size), "--calls", str(calls), "--warmup", str(warmup),
            "--max-seconds", str(max(1.0, timeout - 10)), "--json", *map(str, extra)]
    cp = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    result = {}
    line = cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else ""
    if line.startswith("{"):
        result = json.loads(line)
    return ClientRun(args, cp.returncode, cp.stdout, cp.stderr, result)


@pytest.fixture(scope="session", name="rpc_free_port")
def rpc_free_port_fixture():
    """The free_port() function: a 127.0.0.1 port free for both TCP and UDP."""
    return free_port


@pytest.fixture(scope="session", name="rpc_client")
def rpc_client_fixture():
    """run_client(server_or_port, transport=, proc=, size=, calls=, warmup=, extra=[...]) -> ClientRun."""
    return run_client


def signal_when_ready(proc, ready, sig, wait=120.0):
    """Wait (at most `wait` s) until ready() holds while proc still runs, let it go on for a second,
    send it sig and return its (stdout, stderr). Fails if proc ended first, with its output."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    time.sleep(1.0)
    proc.send_signal(sig)
    return proc.communicate(timeout=120)


@pytest.fixture(scope="session", name="signal_when_ready")
def signal_when_ready_fixture():
    """The signal_when_ready(proc, ready, sig) function."""
    return signal_when_ready
