"""The rpcscope command line: one program, one subcommand per job.

Each subcommand lives in its own module, which defines
    register(subparsers) -> argparse parser with set_defaults(func=...)
and func(args) returns the exit status.
"""
import argparse
import importlib
import sys

from .output import ReaderGoneSafe, UserError

# Modules that provide subcommands, in the order `rpcscope --help` lists them: the pipeline's stages
# as a run goes through them (analysis.model_cli registers model, whatif and verify), then the rest.
COMMAND_MODULES = [
    "rpcscope.testbed.cli",
    "rpcscope.deploy",
    "rpcscope.collectors.cli",
    "rpcscope.analysis.cli",
    "rpcscope.analysis.rtp_cli",
    "rpcscope.analysis.model_cli",
    "rpcscope.reports.cli",
    "rpcscope.analysis.export",
    "rpcscope.pipeline",
    "rpcscope.analysis.crosscheck",
    "rpcscope.experiments.cli",
    "rpcscope.bench",
    "rpcscope.stubs.cli",
]

EPILOG = """the pipeline (rpcscope run runs it all and prints each stage's command line):
  testbed up -> deploy -> capture -> analyze -> rtp -> model -> report -> testbed down
  then, on its run directory: whatif (the model on another link, at other sizes) -> verify (beside
  a capture of that link); export (calls as a Perfetto trace)
  run --target libtirpc|grpc|reference: an RPC rpcscope did not write, from kernel events alone; crosscheck
  (the reference RPC's kernel-only steps beside its tracepoint-based ones)

examples:
  rpcscope run                             the main job on the local testbed (make run)
  rpcscope bench null --calls 20000        null-RPC RTT next to sockperf
  rpcscope COMMAND --help                  help and examples for one command
"""


def build_parser():
    ap = argparse.ArgumentParser(
        prog="rpcscope", description="Where does the time go in an RPC, step by step, on today's Linux?",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return ap


def main(argv=None):
    if isinstance(sys.stdout, ReaderGoneSafe):        # main() called from within main() (rpcscope run)
        return _main(argv)
    sys.stdout = ReaderGoneSafe(sys.stdout)
    try:
        return _main(argv)
    finally:
        safe = sys.stdout
        if isinstance(safe, ReaderGoneSafe):
            safe.flush()                # what is still buffered, while a gone reader is still caught
            sys.stdout = safe._stream


def _main(argv):
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    try:
        return args.func(args) or 0
    except UserError as e:
        print(f"rpcscope {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rpcscope {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
