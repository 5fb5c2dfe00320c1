"""Benchmark: how far one run's p50 moves from the next identical run's, with the address layout
randomized (--aslr on) and fixed (--aslr off, the capture's default), side by side in one run.

Every run of a capture is a fresh rpc-server and rpc-client (collectors/capture.py), so where their
code, stacks and buffers fall changes from run to run unless address-space layout randomization is
off for them. This benchmark runs, on the local testbed with the capture's placement (client and
server each on its own CPU) and idle policy (poll), the untraced build's server and client afresh
for every run, the two settings alternating run by run so that a change of the host's speed touches
both alike. Per size it reports each setting's median p50 and the spread of the runs' p50s (1.4826 x
their median absolute deviation, as % of that median: a standard deviation that the host's bursts
do not decide), and their ratio (random / fixed). Needs root and `rpcscope testbed up`.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from tqdm import tqdm

from . import testbed
from .collectors import capture as cap
from .collectors.capture import NOTRACE_BIN, aslr_prefix, wait_ready
from .collectors.idle import IdlePolicy
from .interrupts import interruptible
from .output import UserError, emit_json, table

EPILOG = """examples:
  rpcscope testbed up && rpcscope bench layout       UDP 0,1392,4016,8032,16064 bytes, 12 runs per setting
  rpcscope bench layout --sizes 8032 --runs 16 --json
  rpcscope bench layout --transport tcp --sizes 0,8032
"""

PORT = 7390                       # below the capture's ports (collectors/capture.py BASE_PORT)
SETTINGS = ("on", "off")          # --aslr: randomized, fixed


def testbed_endpoints(command):
    """({server_ns, client_ns, server address}, {client, server: CPU}) of the local testbed for a
    benchmark that runs the untraced build there, after the checks it needs (root, the testbed up and
    healthy, the tools, the build); command names the benchmark in their messages."""
    if os.geteuid() != 0:
        raise UserError(f"{command} runs processes in the testbed's network namespaces, which needs root")
    st = testbed.load_state()
    if not st or testbed.health(st):
        raise UserError("the local testbed is down or unhealthy; start it with `rpcscope testbed up`")
    for tool in ("ip", "taskset", "setarch"):
        cap.require_tool(tool, "install iproute2 and util-linux (make bootstrap does)")
    if not (cap.NOTRACE_BIN / "rpc-client").exists():
        raise UserError(f"{cap.NOTRACE_BIN}/rpc-client is missing: run `make TRACE=0`")
    hosts = {h["role"]: h for h in st["hosts"]}
    addrs = {"server_ns": hosts["server"]["name"], "client_ns": hosts["client"]["name"],
             "server": hosts["server"]["address"]}
    return addrs, cap.placement_cpus("split")


def start_server(addrs, cpus, transport, port, duration, ready, aslr="off", bindir=None, env=()):
    """The untraced rpc-server (or bindir's, with env: an `env VAR=...` argv prefix) on the testbed's
    server host, its CPU, listening on port (it exits on its own after duration seconds); a UserError if
    it does not start listening."""
    ready.unlink(missing_ok=True)
    server = subprocess.Popen(
        ["ip", "netns", "exec", addrs["server_ns"], *aslr_prefix(aslr), "taskset", "-c", str(cpus["server"]),
         *env, str((bindir or NOTRACE_BIN) / "rpc-server"), "--bind", addrs["server"], "--port", str(port),
         "--transport", transport,
         "--cpu", str(cpus["server"]), "--executors", "0", "--wait", "select", "--duration", str(duration),
         "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not wait_ready(server, ready):
        why = server.stderr.read1(400).decode(errors="replace") if server.poll() is not None else "timeout"
        server.terminate()
        server.wait(timeout=10)
        raise UserError(f"rpc-server did not start listening on {addrs['server']}:{port}: {why}")
    return server


def client_argv(addrs, cpus, transport, port, size, calls, warmup, max_seconds, aslr="off", bindir=None, env=(),
                extra=()):
    """The argv of an rpc-client of the untraced build (or bindir's, with env: an `env VAR=...` argv
    prefix) on the testbed's client host, its CPU, calling maxarg of size bytes on port, --json."""
    return ["ip", "netns", "exec", addrs["client_ns"], *aslr_prefix(aslr), "taskset", "-c", str(cpus["client"]),
            *env, str((bindir or NOTRACE_BIN) / "rpc-client"), "--server", addrs["server"], "--port", str(port),
            "--transport", transport, "--proc", "maxarg", "--size", str(size), "--calls", str(calls),
            "--warmup", str(warmup), "--cpu", str(cpus["client"]), "--wait", "select",
            "--max-seconds", f"{max_seconds:g}", *extra, "--json"]


def client_result(returncode, stdout, stderr, what):
    """The JSON an rpc-client of client_argv printed; a UserError naming `what` if it failed or a call did."""
    if returncode:
        raise UserError(f"rpc-client ({what}) failed (exit {returncode}): {stderr.strip()[-300:]}")
    res = json.loads(stdout.strip().splitlines()[-1])
    if res.get("errors"):
        raise UserError(f"rpc-client ({what}): {res['errors']} calls failed")
    return res


def _one_run(setting, transport, size, calls, warmup, cpus, addrs, ready):
    server = start_server(addrs, cpus, transport, PORT, 60, ready, aslr=setting)
    try:
        r = subprocess.run(client_argv(addrs, cpus, transport, PORT, size, calls, warmup, 30, aslr=setting),
                           capture_output=True, text=True, timeout=90)
    finally:
        server.terminate()
        server.wait(timeout=10)
    res = client_result(r.returncode, r.stdout, r.stderr, f"ASLR {setting}")
    if res.get("aslr") != setting:
        raise UserError(f"rpc-client ran with ASLR {res.get('aslr')} (asked {setting})")
    return res["rtt_ns"]["p50"]


def spread(p50s):
    """(median, robust spread as % of the median) of one setting's runs: 1.4826 x the median absolute
    deviation, which estimates the standard deviation of normal noise and ignores the host's bursts
    (a few runs 10-25 % slower, all settings alike) that would decide a plain standard deviation."""
    med = statistics.median(p50s)
    return med, 1.4826 * statistics.median(abs(x - med) for x in p50s) * 100 / med


def run(args):
    sizes = cap.parse_sizes(args.sizes)
    if args.transport not in ("udp", "tcp"):
        raise UserError(f"--transport {args.transport!r}: use udp or tcp")
    if not 2 <= args.runs <= 100:
        raise UserError(f"--runs {args.runs}: use 2 to 100 runs per setting and size")
    addrs, cpus = testbed_endpoints("bench layout")
    cap.check_sizes("maxarg", sizes)
    p50s = {(s, k): [] for s in sizes for k in SETTINGS}
    steps = [(s, k) for s in sizes for _ in range(args.runs) for k in SETTINGS]
    # SIGTERM as Ctrl-C (rpcscope/interrupts.py): the run's `finally` then ends its server.
    with interruptible(), IdlePolicy("poll"), tempfile.TemporaryDirectory(prefix="rpcscope-bench-layout-") as tmp:
        ready = pathlib.Path(tmp) / "server.ready"
        for size, setting in tqdm(steps, desc="bench layout", unit="run", disable=args.json or not sys.stderr.isatty()):
            p50s[(size, setting)].append(
                _one_run(setting, args.transport, size, args.calls, args.warmup, cpus, addrs, ready))
    rows = []
    for s in sizes:
        (med_on, sd_on), (med_off, sd_off) = spread(p50s[(s, "on")]), spread(p50s[(s, "off")])
        rows.append({"size": s, "p50_us_random": med_on / 1e3, "spread_%_random": sd_on,
                     "p50_us_fixed": med_off / 1e3, "spread_%_fixed": sd_off,
                     "spread_ratio": sd_on / sd_off if sd_off else None,
                     "runs_p50_ns": {"random": p50s[(s, "on")], "fixed": p50s[(s, "off")]}})
    result = {"transport": args.transport, "proc": "maxarg", "runs": args.runs, "calls": args.calls,
              "warmup": args.warmup, "build": "notrace", "placement": cpus, "sizes": rows}
    if args.json:
        emit_json(result)
        return 0
    print(f"run-to-run spread of p50, {args.transport} maxarg, untraced, {args.runs} fresh runs per setting "
          f"and size, alternating; client CPU {cpus['client']}, server CPU {cpus['server']}")
    table(rows, ["size", "p50_us_random", "spread_%_random", "p50_us_fixed", "spread_%_fixed", "spread_ratio"])
    print("random: the kernel's address layout (--aslr on); fixed: setarch -R (--aslr off, the capture's default); "
          "spread_%: 1.4826 x the median absolute deviation of the runs' p50s, as % of their median")
    return 0


def register(sub):
    p = sub.add_parser("layout", help="run-to-run spread of p50 with the address layout random and fixed",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="0,1392,4016,8032,16064", help="payload sizes (default 0,1392,4016,8032,16064)")
    p.add_argument("--transport", default="udp", help="udp or tcp (default udp)")
    p.add_argument("--runs", type=int, default=12, help="runs per setting and size (default 12)")
    p.add_argument("--calls", type=int, default=2000, help="measured calls per run, as the capture's (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="warm-up calls per run (default 200)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p
