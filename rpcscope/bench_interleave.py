"""Benchmark: how far two runs' p50s differ, and how much that moves, when they run one after the
other, as the capture's kinds do, and when they take turns in slices of a few milliseconds at once
(collectors/interleave.py), side by side in one run.

Two server and client pairs, A and B, run on the local testbed with the capture's placement (clients
on the client's CPU, servers on the server's) and idle policy (poll). A is untraced; B is alike in
every way but its port, or of the clock build (--b-build clock: then the pair measures what the clock
build's marks cost, the term that anchors the probe effect, analysis/MODEL.md). Each round
runs A then B for --seconds each ("one after the other"), and A and B taking turns every --slice-ms
until each has had about --seconds of calls ("taking turns"). Per way, the spread of
100 ln(p50 A / p50 B) over the rounds says how much of the host's noise the two runs share: 0 where
they see the same host, the host's own run-to-run noise where they do not. Needs root and
`rpcscope testbed up`.
"""
import argparse
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile

from tqdm import tqdm

from .bench_layout import client_argv, client_result, start_server, testbed_endpoints
from .collectors import capture as cap
from .collectors.capture import CLOCK_BIN, NOTRACE_BIN, clock_env
from .collectors.idle import IdlePolicy
from .collectors.interleave import take_turns
from .interrupts import interruptible, uninterrupted
from .output import UserError, emit_json, table

EPILOG = """examples:
  rpcscope testbed up && rpcscope bench interleave   UDP 4016 bytes, 8 rounds of 1 s a run, 5 ms turns
  rpcscope bench interleave --transport tcp --size 0 --slice-ms 2
  rpcscope bench interleave --rounds 12 --json
  rpcscope bench interleave --b-build clock         B of the clock build (make TRACE=clock): its marks' cost

On a busy host (`rpcscope bench interleave`, the defaults): the ln ratio's standard deviation was
7.27 % one after the other and 0.33 % taking turns, 22 times less, while A's p50s ranged over 37-55
us. Over loopback (12 rounds): 7.8 % and 1.15 % with 10 ms turns, 4.7 % and 0.60 % with 2 ms turns.
"""

PORT = 7392                        # beside bench layout's (7390), below the capture's (7300 + ...)
WAYS = ("one after the other", "taking turns")


def _build(name, tmp, role, port):
    """(bindir, env argv prefix) of B's build: notrace, or clock, whose marks go to a ring in tmp (as
    the capture's rounds' clock runs keep them, collectors/capture.py clock_env)."""
    if name == "clock":
        return CLOCK_BIN, clock_env(pathlib.Path(tmp) / f"clock-{role}-{port}.txt", ring=True)
    return NOTRACE_BIN, []


def _p50(proc, what):
    out, err = proc.communicate(timeout=120)
    return client_result(proc.returncode, out, err, what)["rtt_ns"]["p50"]


def _round(addrs, cpus, args, tmp):
    """{way: (p50 A, p50 B)} of one round."""

    def spawn(port, seconds):
        bindir, env = _build(args.b_build, tmp, "client", port) if port == PORT + 1 else (None, ())
        # Calls enough for any --seconds: the run ends at its --max-seconds.
        return subprocess.Popen(client_argv(addrs, cpus, args.transport, port, args.size, 10_000_000, 200, seconds,
                                            bindir=bindir, env=env, extra=("--hist-bin-ns", "0")),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, procs = {}, []
    try:                  # an error or Ctrl-C leaves no client behind, running or stopped
        procs.append(spawn(PORT, args.seconds))
        pa = _p50(procs[-1], "A, alone")
        procs.append(spawn(PORT + 1, args.seconds))
        out[WAYS[0]] = (pa, _p50(procs[-1], "B, alone"))
        # Each measures for twice --seconds of wall time, half of it stopped: about --seconds of calls each.
        pair = [spawn(PORT, 2 * args.seconds), spawn(PORT + 1, 2 * args.seconds)]
        procs += pair
        take_turns(pair, args.slice_ms / 1e3, 2 * args.seconds + 60)
        out[WAYS[1]] = (_p50(pair[0], "A, taking turns"), _p50(pair[1], "B, taking turns"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    return out


def pair_spread(pairs):
    """(mean, standard deviation, 1.4826 x median absolute deviation) of 100 ln(A / B) over pairs, in %:
    how far B lies from A, and how far that moves from one pair to the next."""
    d = [100 * math.log(a / b) for a, b in pairs]
    med = statistics.median(d)
    return statistics.mean(d), statistics.pstdev(d), 1.4826 * statistics.median(abs(x - med) for x in d)


def run(args):
    if args.transport not in ("udp", "tcp"):
        raise UserError(f"--transport {args.transport!r}: use udp or tcp")
    if not 2 <= args.rounds <= 100:
        raise UserError(f"--rounds {args.rounds}: use 2 to 100")
    if not 0.05 <= args.seconds <= 30:
        raise UserError(f"--seconds {args.seconds:g}: use 0.05 to 30 seconds of calls a run")
    if not 1 <= args.slice_ms <= 1000:
        raise UserError(f"--slice-ms {args.slice_ms:g}: use 1 to 1000 ms")
    cap.check_sizes("maxarg", [args.size])
    addrs, cpus = testbed_endpoints("bench interleave")
    if args.b_build == "clock" and not (cap.CLOCK_BIN / "rpc-client").exists():
        raise UserError(f"{cap.CLOCK_BIN}/rpc-client is missing: run `make TRACE=clock`")
    # The servers' own bound: every round's runs, with room to spare.
    duration = int(args.rounds * 4 * args.seconds + 120)
    pairs = {w: [] for w in WAYS}
    servers = []
    # SIGTERM as Ctrl-C (rpcscope/interrupts.py): either ends the rounds through the `finally`s, which
    # leave no client or server behind, none stopped.
    with interruptible(), IdlePolicy("poll"), tempfile.TemporaryDirectory(prefix="rpcscope-bench-interleave-") as tmp:
        try:
            for port in (PORT, PORT + 1):
                bindir, env = _build(args.b_build, tmp, "server", port) if port == PORT + 1 else (None, ())
                servers.append(start_server(addrs, cpus, args.transport, port, duration,
                                            pathlib.Path(tmp) / f"server-{port}.ready", bindir=bindir, env=env))
            for _ in tqdm(range(args.rounds), desc="bench interleave", unit="round",
                          disable=args.json or not sys.stderr.isatty()):
                for way, pair in _round(addrs, cpus, args, tmp).items():
                    pairs[way].append(pair)
        finally:
            with uninterrupted():
                for s in servers:
                    s.terminate()
                    s.wait(timeout=10)
    rows = []
    for way in WAYS:
        mean, sd, mad = pair_spread(pairs[way])
        a_us = [a / 1e3 for a, _ in pairs[way]]
        rows.append({"way": way, "rounds": len(pairs[way]), "p50_us_A_median": statistics.median(a_us),
                     "p50_us_A_least": min(a_us), "p50_us_A_most": max(a_us),
                     "B_minus_A_us_median": statistics.median((b - a) / 1e3 for a, b in pairs[way]),
                     "ln_ratio_mean_%": mean,
                     "ln_ratio_sd_%": sd, "ln_ratio_spread_%": mad,
                     "p50_ns": [list(p) for p in pairs[way]]})
    result = {"transport": args.transport, "proc": "maxarg", "size": args.size, "rounds": args.rounds,
              "seconds": args.seconds, "slice_ms": args.slice_ms, "build": "notrace", "b_build": args.b_build,
              "placement": cpus,
              "ways": rows, "sd_ratio": rows[0]["ln_ratio_sd_%"] / rows[1]["ln_ratio_sd_%"]
              if rows[1]["ln_ratio_sd_%"] else None}
    if args.json:
        emit_json(result)
        return 0
    print(f"two runs, A (untraced) and B ({args.b_build} build), {args.transport} maxarg {args.size} bytes, "
          f"{args.rounds} rounds "
          f"of {args.seconds:g} s of calls a run; turns of {args.slice_ms:g} ms; client CPU {cpus['client']}, "
          f"server CPU {cpus['server']}")
    table(rows, ["way", "rounds", "p50_us_A_median", "p50_us_A_least", "p50_us_A_most", "B_minus_A_us_median",
                 "ln_ratio_mean_%", "ln_ratio_sd_%", "ln_ratio_spread_%"])
    print("ln_ratio: 100 ln(p50 A / p50 B) per round, its mean, standard deviation and 1.4826 x median absolute "
          "deviation over the rounds: how far B lies from A (0 for two identical runs), and how far that moves "
          "from one round to the next")
    if result["sd_ratio"]:
        print(f"one after the other / taking turns: {result['sd_ratio']:.1f} x the standard deviation")
    return 0


def register(sub):
    p = sub.add_parser("interleave",
                       help="how far two identical runs differ one after the other and taking turns",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=4016, help="payload bytes (default 4016)")
    p.add_argument("--transport", default="udp", help="udp or tcp (default udp)")
    p.add_argument("--rounds", type=int, default=8, help="rounds, each with both ways (default 8)")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds of calls a run (default 1)")
    p.add_argument("--slice-ms", type=float, default=5.0, help="a turn, in ms (default 5)")
    p.add_argument("--b-build", choices=("notrace", "clock"), default="notrace",
                   help="B's build: notrace, as A (default: two identical runs), or clock (make TRACE=clock, "
                        "its marks kept in a ring as the capture's rounds keep them)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p
