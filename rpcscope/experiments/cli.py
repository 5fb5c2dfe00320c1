"""`rpcscope experiment NAME`: one of the seeds' comparison tables, reproduced on the local testbed
with today's RPC systems side by side, the paper's own figures beside them.

    netwise          per-call RTT of void, add, integer 100/1000, string, opaque 4000/8000/16000;
                     reference RPC and libtirpc over UDP and TCP, gRPC over TCP, sockperf the floor
    courier          TCP against UDP, arguments of 0/4/400/4000 bytes with and without a result
                     (no-result calls do not wait), 2000 calls a run; the client's CPU split into send,
                     receive and marshalling (byte swapping) from a perf profile
    firefly          Null(), MaxResult(1440), MaxArg(1440) against 1-8 caller threads (Table I);
                     client and server on two CPUs against one (Tables X and XI)
    dce-throughput   null calls/s and 4016-byte sends against 1-10 client threads (Table 1), the first
                     call against later ones, and the floor against sockperf

Every system runs in the same run, on the same link and placement, the systems taking turns round
after round; a figure is the median of the rounds with its spread, a ratio is taken within each
round. Every client checks every result it receives; a run whose checks fail makes the command
fail (exit 1) and its cell reads FAILED. Needs root and `rpcscope testbed up`; the programs come
from `make TRACE=0` and `make peers`.
"""
import argparse
import datetime
import pathlib
import tempfile

from ..collectors.idle import IdlePolicy
from ..interrupts import interruptible
from ..output import UserError, emit_json
from . import courier, netwise, threads
from .systems import Servers, testbed_placement
from .tables import Budget, count_runs, failures, progress_bar, sweep

NAMES = ("netwise", "courier", "firefly", "dce-throughput")
DEFAULT_CALLS = {"netwise": 500, "courier": 2000, "firefly": 1000, "dce-throughput": 1000}
DEFAULT_THREADS = {"firefly": "1-8", "dce-throughput": "1-10"}

EPILOG = """examples:
  rpcscope testbed up
  rpcscope experiment netwise                       3 rounds of 500 calls per cell
  rpcscope experiment dce-throughput --threads 1,2,4,10 --json
  rpcscope experiment firefly --repeats 5 --markdown runs/firefly.md
  rpcscope experiment courier --transports udp
"""


def parse_threads(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                out.extend(range(a, b + 1))
            elif part:
                out.append(int(part))
        except ValueError:
            raise UserError(f"--threads {text!r}: give numbers and ranges, e.g. 1-10 or 1,2,4") from None
    if not out or any(n < 1 or n > 64 for n in out):
        raise UserError(f"--threads {text!r}: give 1 to 64 threads")
    return sorted(set(out))


def check_args(args):
    if args.name not in NAMES:
        raise UserError(f"no experiment {args.name!r}: use one of {', '.join(NAMES)}")
    if not 1 <= args.repeats <= 50:
        raise UserError(f"--repeats {args.repeats}: use 1 to 50 rounds")
    if args.calls is not None and not 1 <= args.calls <= 1000000:
        raise UserError(f"--calls {args.calls}: use 1 to 1000000")
    if not 0 <= args.warmup <= 100000:
        raise UserError(f"--warmup {args.warmup}: use 0 to 100000")
    if not 0 < args.max_minutes <= 600:
        raise UserError(f"--max-minutes {args.max_minutes}: use more than 0 and at most 600")
    if args.tests is not None and args.name != "netwise":
        raise UserError("--tests selects netwise's rows: the other experiments take --threads or --transports")
    if args.markdown and not pathlib.Path(args.markdown).parent.is_dir():
        raise UserError(f"--markdown {args.markdown}: its directory does not exist")


def run(args):
    check_args(args)
    calls = args.calls or DEFAULT_CALLS[args.name]
    nthreads = parse_threads(args.threads or DEFAULT_THREADS.get(args.name, "1"))
    placement = testbed_placement(args.placement)
    budget = Budget(args.max_minutes)
    result = {"experiment": args.name, "created": datetime.datetime.now(datetime.timezone.utc)
              .isoformat(timespec="seconds"), "placement": placement.describe(), "placement_name": placement.name,
              "wait": args.wait, "server": "inline (rpc-server --executors 0)" if not args.executors
              else f"{args.executors} executor threads", "repeats": args.repeats, "calls": calls,
              "warmup": args.warmup, "build": "notrace", "idle": args.idle}
    lines = []
    say = lines.append
    # Waiting CPUs poll (collectors/idle.py), as in the capture: a halted vCPU's wake-up would
    # otherwise add tens of us to every system's reply alike and hide their differences.
    with interruptible(), IdlePolicy(args.idle), tempfile.TemporaryDirectory(prefix="rpcscope-experiment-") as tmp:
        if args.name == "netwise":
            rows = netwise.select(args.tests)
            cells = _run_netwise(args, placement, calls, rows, budget, tmp)
            result["table"] = netwise.build(cells, rows)
            netwise.render(result, cells, rows, say=say)
            bad = failures(cells)
        elif args.name == "dce-throughput":
            cells = _run_dce(args, placement, calls, nthreads, budget, tmp)
            result["threads"] = nthreads
            result["table"] = threads.dce_build(cells, nthreads)
            threads.dce_render(result, cells, nthreads, say=say)
            bad = failures(cells)
        elif args.name == "firefly":
            xi = [n for n in nthreads if n <= 5]
            by_pl = _run_firefly(args, placement, calls, nthreads, xi, budget, tmp)
            result["threads"] = nthreads
            result["table"] = threads.firefly_build(by_pl, nthreads, xi)
            threads.firefly_render(result, by_pl, nthreads, xi, say=say)
            bad = failures(by_pl["split"]) + [(f"one CPU: {k}", e) for k, e in failures(by_pl["one"])]
        else:
            transports = [t.strip() for t in args.transports.split(",") if t.strip()]
            res = courier.run(args, placement, calls, transports, budget, tmp)
            result.update(res.meta)
            result["table"] = res.table
            courier.render(result, res, say=say)
            bad = res.failures
    result["failures"] = [{"cell": k, "error": e} for k, e in bad]
    result["complete"] = not bad
    if bad:
        say("")
        say(f"FAILED: {len(bad)} cells did not run or their results did not check:")
        for k, e in bad:
            say(f"  {k}: {e}")
    if args.markdown:
        pathlib.Path(args.markdown).write_text(
            f"# rpcscope experiment {args.name}\n\n```\n$ rpcscope experiment {args.name}"
            f"{_argv_note(args)}\n\n" + "\n".join(lines) + "\n```\n")
    if args.json:
        emit_json(result)
    else:
        print("\n".join(lines))
    return 1 if bad else 0


def _argv_note(args):
    """The options the run was given, for the Markdown page's command line."""
    parts = [f"--repeats {args.repeats}"]
    for name in ("calls", "threads", "tests", "transports"):
        v = getattr(args, name)
        if v is not None and not (name == "transports" and args.name != "courier"):
            parts.append(f"--{name} {v!r}" if name == "tests" else f"--{name} {v}")
    if args.wait != "select":
        parts.append(f"--wait {args.wait}")
    if args.placement != "split":
        parts.append(f"--placement {args.placement}")
    return " " + " ".join(parts)


def _run_netwise(args, placement, calls, rows, budget, tmp):
    specs = netwise.specs(rows)
    with progress_bar(count_runs(specs, args.repeats), "netwise", args.json) as bar, \
            Servers(placement, ("rpcscope", "tirpc", "grpc", "sockperf"), tmp, args.max_minutes * 60 + 60,
                    args.executors) as srv:
        return sweep(srv, specs, args.repeats, calls, args.warmup, budget, bar, wait=args.wait,
                     sockperf_seconds=args.sockperf_seconds)


def _run_dce(args, placement, calls, nthreads, budget, tmp):
    main_specs, floor = threads.dce_specs(nthreads)
    specs = main_specs + floor

    def calls_for(spec):
        return threads.per_thread(calls, spec.threads)

    with progress_bar(count_runs(specs, args.repeats), "dce-throughput", args.json) as bar, \
            Servers(placement, ("rpcscope", "tirpc", "grpc", "sockperf"), tmp, args.max_minutes * 60 + 60,
                    args.executors) as srv:
        return sweep(srv, specs, args.repeats, calls_for, args.warmup, budget, bar, wait=args.wait,
                     sockperf_seconds=args.sockperf_seconds)


def _run_firefly(args, placement, calls, nthreads, xi, budget, tmp):
    table1, by_placement = threads.firefly_specs(nthreads, xi)
    one = testbed_placement("one")
    total = count_runs(table1 + by_placement, args.repeats) + count_runs(by_placement, args.repeats)
    cells = {"split": {}, "one": {}}

    def calls_for(spec):
        return threads.per_thread(calls, spec.threads)

    with progress_bar(total, "firefly", args.json) as bar:
        for rnd in range(args.repeats):
            # The placements alternate round by round: each round restarts the servers on their CPU.
            for name, pl, specs in (("split", placement, table1 + by_placement), ("one", one, by_placement)):
                with Servers(pl, ("rpcscope", "tirpc", "grpc") if name == "split" else ("rpcscope", "tirpc"),
                             tmp, args.max_minutes * 60 + 60, args.executors) as srv:
                    sweep(srv, specs, 1, calls_for, args.warmup, budget, bar, wait=args.wait, cells=cells[name],
                          round_offset=rnd)
    return cells


def register(sub):
    p = sub.add_parser("experiment", help="a seed's comparison table with today's RPC systems side by side",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="netwise, courier, firefly or dce-throughput")
    p.add_argument("--repeats", type=int, default=3, help="rounds, every cell once a round (default 3)")
    p.add_argument("--calls", type=int, default=None,
                   help="calls a run (netwise 500, courier 2000, firefly and dce-throughput 1000 shared among "
                        "the threads)")
    p.add_argument("--warmup", type=int, default=100, help="checked warm-up calls per thread (default 100)")
    p.add_argument("--threads", default=None, help="thread counts (firefly 1-8, dce-throughput 1-10)")
    p.add_argument("--placement", choices=("split", "one"), default="split",
                   help="split: client and server each on its own CPU (default); one: both on one CPU")
    p.add_argument("--wait", choices=("select", "recv"), default="select",
                   help="the reference client's wait: select (DCE's steps, default) or recv")
    p.add_argument("--idle", choices=("poll", "os"), default="poll",
                   help="idle CPUs poll (default, as the capture) or halt as the OS decides")
    p.add_argument("--executors", type=int, default=0, help="reference server executors (default 0: inline)")
    p.add_argument("--tests", default=None,
                   help="netwise: the tests (rows) to run, comma-separated (default all: void,add,integer 100,...)")
    p.add_argument("--transports", default="udp,tcp", help="courier: udp, tcp or both (default udp,tcp)")
    p.add_argument("--sockperf-seconds", type=float, default=1.0, help="length of a sockperf run (default 1)")
    p.add_argument("--no-profile", action="store_true", help="courier: skip the perf profile")
    p.add_argument("--max-minutes", type=float, default=30.0, help="stop with an error after this long (default 30)")
    p.add_argument("--markdown", metavar="PATH", help="also write the tables to this Markdown file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p
