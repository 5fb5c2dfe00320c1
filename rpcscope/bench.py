"""`rpcscope bench NAME`: the benchmarks (not tests), one command group.

Each benchmark lives beside the code it measures and registers its own parser under the group;
an error names the benchmark (`rpcscope bench NAME: ...`).
"""
import argparse

from . import bench_interleave, bench_layout, bench_null
from .analysis import bench as analysis_bench
from .collectors import cli as capture_cli, eventcost

# Each benchmark's registration, in the order `rpcscope bench --help` lists them.
BENCHMARKS = [
    bench_null.register,                # rpcscope/bench_null.py
    capture_cli.register_bench,         # collectors/cli.py
    eventcost.register,                 # collectors/eventcost.py
    analysis_bench.register,            # analysis/bench.py
    bench_layout.register,              # rpcscope/bench_layout.py
    bench_interleave.register,          # rpcscope/bench_interleave.py
]

EPILOG = """examples:
  rpcscope bench null                       null-RPC RTT next to sockperf (make bench)
  rpcscope bench capture                    a capture's probe effect, events and bytes per call (make bench-capture)
  rpcscope bench event-cost                 one recorded kernel event's cost, perf beside ftrace (make bench-event-cost)
  rpcscope bench analysis runs/NAME         the analysis's events/s and peak memory (make bench-analysis)
  rpcscope bench layout                     run-to-run spread with the address layout random and fixed
  rpcscope bench interleave                 two identical runs one after the other and taking turns
  rpcscope bench NAME --help                one benchmark's options and what it prints

The benchmarks report figures; they assert nothing. capture, layout and interleave need
root and `rpcscope testbed up`; event-cost needs root, perf and tracefs.
"""


def register(subparsers):
    ap = subparsers.add_parser(
        "bench", help="benchmarks (not tests): null RPC, capture, kernel event cost, analysis, layout, turns",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="benchmark", metavar="NAME")
    for reg in BENCHMARKS:
        p = reg(sub)
        p.set_defaults(command=f"bench {p.prog.split()[-1]}")

    def no_name(args):
        ap.print_help()
        return 2
    ap.set_defaults(func=no_name)
    return ap
