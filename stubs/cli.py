"""`rpcscope stubs ...`: the stub design alternatives of Chung et al."""
import argparse
import sys

from rpcscope.output import UserError, emit_json

from . import bench

EPILOG = """examples:
  rpcscope stubs bench                      Tables 2-6 and the paper's conclusions, this machine
  rpcscope stubs bench --reps 1001          more batches per cell: slower, steadier medians
  rpcscope stubs bench --json > stubs.json  everything, machine-readable
  rpcscope stubs bench --no-callgrind       skip the instruction counts (no valgrind run)
"""


def register(subparsers):
    ap = subparsers.add_parser(
        "stubs", help="stub design alternatives: compiled vs interpreted, inline vs procedural, byte/item/block copy",
        description="Chung, Lazowska, Notkin and Zahorjan's stub design alternatives on this machine.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stubs_command", metavar="SUBCOMMAND")
    b = sub.add_parser(
        "bench", help="marshalling cost of every variant x workload, with the fitted cost model",
        description="Time marshalling without transport for every stub variant and workload (build/stubs/stubbench, "
                    "built by `make stubs`), count instructions under callgrind where valgrind is installed, fit "
                    "the paper's cost model and print its Tables 2-6 next to the MicroVAX-II's.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--reps", type=int, default=501, help="timed batches per cell (default 501); the median is reported")
    b.add_argument("--batch-us", type=float, default=20.0, help="minimum length of one timed batch in us (default 20)")
    b.add_argument("--cpu", type=int, default=None, help="CPU to pin the driver to (default: the last one)")
    b.add_argument("--no-callgrind", action="store_true", help="do not count instructions under valgrind")
    b.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    b.set_defaults(func=run_bench)
    ap.set_defaults(func=lambda args: (ap.print_help(), 2)[1])
    return ap


def run_bench(args):
    import os

    from tqdm import tqdm

    if args.reps < 5 or args.batch_us <= 0:
        raise UserError("--reps must be at least 5 and --batch-us positive")
    cpu = args.cpu if args.cpu is not None else (os.cpu_count() or 1) - 1
    bar = tqdm(total=args.reps, desc="timing batches", unit="round", file=sys.stderr, leave=False)

    def progress(done, total):
        bar.update(done - bar.n)

    try:
        data = bench.run_driver(args.reps, args.batch_us * 1000.0, cpu, progress)
        bar.close()
        instr = None
        if not args.no_callgrind:
            with tqdm(total=1, desc="callgrind instruction counts", file=sys.stderr, leave=False) as b2:
                instr = bench.run_callgrind()
                b2.update(1)
        cells, theta = bench.analyse(data, instr)
    except bench.BenchError as e:
        bar.close()
        raise UserError(str(e))
    if args.json:
        emit_json(bench.to_json(cells, theta, data))
    else:
        bench.report(cells, theta, data)
    return 0
