"""Benchmark: null-RPC round-trip time next to sockperf's UDP ping-pong, in one run.

Client and server are pinned to the same CPU (on this VM a reply that must
wake an idle vCPU costs ~40 us against ~5 us on a shared one), on loopback,
with the untraced build (make TRACE=0). The server runs in inline mode and
in executor-pool mode; the pool pays one extra thread hand-off (step S5).
Each mode is measured as DCE structures the wait (a select that sleeps,
then recvfrom), without the zero-timeout select before it (-lean,
--no-nb-select), and sleeping in a blocking recvfrom as sockperf does
(-recv, --wait recv). The programs run alternately, several rounds each, and the medians of
the rounds' p50s are compared, so slow drift on the machine hits both alike.
"""
import argparse
import json
import pathlib
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from tqdm import tqdm

from . import ROOT
from .output import UserError, emit_json, table

EPILOG = """examples:
  rpcscope bench null                       3 rounds of 20000 calls, CPU 0
  rpcscope bench null --rounds 5 --json     machine-readable
  make bench                                the same, after building
"""


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        return u.getsockname()[1]


def _wait_file(path, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            return
        time.sleep(0.02)
    raise UserError(f"{path} did not appear: the server failed to start")


def sockperf_p50_ns(cpu, seconds):
    """sockperf UDP ping-pong, 64-byte messages, full round trip: p50 in ns."""
    port = _free_port()
    server = subprocess.Popen(["taskset", "-c", str(cpu), "sockperf", "sr", "-i", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        r = subprocess.run(["taskset", "-c", str(cpu), "sockperf", "pp", "-i", "127.0.0.1", "-p", str(port),
                            "-t", str(seconds), "-m", "64", "--full-rtt"],
                           capture_output=True, text=True, timeout=seconds + 30)
    finally:
        server.terminate()
        server.wait(timeout=10)
    m = re.search(r"percentile 50\.000 =\s*([0-9.]+)", r.stdout + r.stderr)
    if r.returncode or not m:
        raise UserError(f"sockperf failed (exit {r.returncode}): {(r.stderr or r.stdout)[-400:]}")
    return float(m.group(1)) * 1000.0


def rpc_p50_ns(cpu, executors, calls, warmup, build="notrace", extra=()):
    bindir = ROOT / "build" / build / "bin"
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        ready = pathlib.Path(tmp) / "ready"
        server = subprocess.Popen([bindir / "rpc-server", "--port", str(port), "--transport", "udp",
                                   "--executors", str(executors), "--cpu", str(cpu), "--duration", "600",
                                   "--ready-file", ready, *extra], stderr=subprocess.DEVNULL)
        try:
            _wait_file(ready)
            r = subprocess.run([bindir / "rpc-client", "--port", str(port), "--cpu", str(cpu), "--proc", "null",
                                "--calls", str(calls), "--warmup", str(warmup), "--json", *extra],
                               capture_output=True, text=True, timeout=600)
        finally:
            server.terminate()
            server.wait(timeout=10)
    if r.returncode:
        raise UserError(f"rpc-client failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["rtt_ns"]["p50"]


def run(args):
    for tool in ("sockperf", "taskset"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is not installed: run `make bootstrap`")
    bindir = ROOT / "build" / "notrace" / "bin"
    if not (bindir / "rpc-client").exists():
        raise UserError(f"{bindir}/rpc-client is missing: run `make TRACE=0`")
    # inline/pool: DCE's structure (select, then recvfrom). inline-lean: no
    # zero-timeout select before each blocking one (C11, S12). *-recv: sleep in
    # a blocking recvfrom as sockperf does (no select steps at all).
    recv = ("--wait", "recv")
    modes = {"inline": (0, ()), "inline-lean": (0, ("--no-nb-select",)), "inline-recv": (0, recv),
             "pool": (args.executors, ()), "pool-recv": (args.executors, recv)}
    rows = {"sockperf": [], **{m: [] for m in modes}}
    steps = [(r, k) for r in range(args.rounds) for k in rows]
    for _, kind in tqdm(steps, desc="bench null", unit="run", disable=args.json or not sys.stderr.isatty()):
        if kind == "sockperf":
            rows[kind].append(sockperf_p50_ns(args.cpu, args.seconds))
        else:
            executors, extra = modes[kind]
            rows[kind].append(rpc_p50_ns(args.cpu, executors, args.calls, args.warmup, extra=extra))
    ref = statistics.median(rows["sockperf"])
    result = {
        "cpu": args.cpu, "rounds": args.rounds, "calls": args.calls, "build": "notrace",
        "sockperf_p50_ns": ref,
        "modes": [{"mode": m, "p50_ns": statistics.median(rows[m]), "ratio": statistics.median(rows[m]) / ref,
                   "rounds_p50_ns": rows[m]} for m in modes],
        "sockperf_rounds_p50_ns": rows["sockperf"],
        "goal_inline_ratio": 1.3,
    }
    if args.json:
        emit_json(result)
        return 0
    print(f"null RPC vs sockperf UDP ping-pong, loopback, client and server on CPU {args.cpu}, "
          f"median of {args.rounds} rounds")
    table([{"what": "sockperf pp (64 B)", "p50_us": ref / 1e3, "ratio": 1.0}] +
          [{"what": f"rpc null, {m['mode']}", "p50_us": m["p50_ns"] / 1e3, "ratio": m["ratio"]}
           for m in result["modes"]], ["what", "p50_us", "ratio"])
    print("goal: inline ratio <= 1.3; pool mode adds the S5 hand-off to an executor thread;"
          " -recv modes have no select steps (C11, C17, S3, S12)")
    return 0


def register(sub):
    p = sub.add_parser("null", help="null-RPC RTT next to sockperf's UDP ping-pong",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", type=int, default=0, help="CPU for client and server (default 0)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--calls", type=int, default=20000, help="null calls per round (default 20000)")
    p.add_argument("--warmup", type=int, default=2000, help="warm-up calls per round (default 2000)")
    p.add_argument("--seconds", type=int, default=2, help="sockperf run time per round (default 2)")
    p.add_argument("--executors", type=int, default=2, help="executor threads in pool mode (default 2)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p

