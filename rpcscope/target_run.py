"""`rpcscope run --target libtirpc|grpc|reference`: an RPC rpcscope did not write, end to end on the local
testbed, from kernel events alone.

    testbed up (if down) -> capture (collectors/target.py) -> kernel-only analysis (analysis/kernelonly.py)
    -> step tables and first screens (analysis/kernelonly_out.py) -> testbed down (if this brought it up)

The run directory holds target.json (what was run), cases/ID/ (the traces, the sockets seen, the
client's own report) and analysis/kernelonly.json, analysis/kernelonly-calls.csv.
"""
import datetime
import io
import json
import pathlib
import shutil
from contextlib import redirect_stdout

from .analysis.kernelonly_out import analyze_run, run_json
from .collectors.target import CALL_FUNCTIONS, PROGRAMS, TARGETS, capture, target_record
from .collectors.uprobes import resolve
from .experiments import systems
from .output import UserError, emit_json
from .rundir import RunDir

MAX_ROUNDS = 50


def plan(target, transports, proc, sizes):
    """([(transport, size)] to capture, [notes on the cases left out])."""
    system = TARGETS[target]
    todo, notes = [], []
    for t in transports:
        for s in sizes:
            why = systems.supports(system, t, proc, s)
            if why:
                notes.append(f"{target} {t} {proc} {s}: left out ({why})")
            else:
                todo.append((t, s))
    if not todo:
        raise UserError(f"--target {target}: no case to run ({'; '.join(notes)})")
    return todo, notes


def cmd_run_target(args, sizes, transports, testbed, main):
    target = args.target
    if target not in TARGETS:
        raise UserError(f"--target {target!r}: use one of {', '.join(TARGETS)}")
    out = pathlib.Path(args.out or f"runs/target-{target}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    if out.exists() and not args.replace:
        raise UserError(f"{out} already exists; choose another --out or pass --replace")
    rounds = 1 if args.repeats is None else args.repeats
    if not 1 <= rounds <= MAX_ROUNDS:
        raise UserError(f"--repeats {rounds}: with --target, the rounds of every case, 1 to {MAX_ROUNDS}")
    todo, notes = plan(target, transports, args.proc, sizes)
    resolve(args.uprobe, PROGRAMS[TARGETS[target]])          # an unknown function fails before anything starts
    for n in notes:
        print(n)
    started = testbed.load_state() is None
    made = False
    try:
        if started:
            print("testbed up: rpcscope testbed up", flush=True)
            if main(["testbed", "up"]) != 0:
                raise UserError("`rpcscope testbed up` failed; the message above says why")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        made = True
        cases = capture(target, todo, args.proc, args.calls, args.warmup, out,
                        placement="split" if args.placement == "split" else "one", uprobes=args.uprobe,
                        rounds=rounds)
        RunDir(out).target_json.write_text(json.dumps(target_record(
            target, args.proc, args.calls, args.warmup, rounds, cases, args.uprobe, notes), indent=1))
    except BaseException:
        if made:                                 # no half-made run directory
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        if started and not args.keep_testbed:
            with redirect_stdout(io.StringIO()):
                main(["testbed", "down"])
    try:                                         # the capture is complete: it stays, whatever the analysis does
        summaries, _ = analyze_run(out, quiet=args.json)
    except (Exception, KeyboardInterrupt) as e:
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else str(e) or type(e).__name__
        raise UserError(f"the capture is complete and kept in {out}, but its analysis failed: {why}; "
                        f"`rpcscope analyze {out}` analyzes it again") from None
    if args.json:
        emit_json(run_json(out, summaries))
    else:
        print(f"\nrpcscope run --target {target}: {out}")
        if target in CALL_FUNCTIONS and not args.uprobe:
            print(f"the client's user space before its first send and after its last receive, which the kernel "
                  f"does not see: add --uprobe '{CALL_FUNCTIONS[target]}:call' (its call function; analysis/TARGET.md)")
        if target == "reference":
            both = f"{out}-both"
            print(f"the same cases traced, and their steps beside these, both builds taking turns in one capture "
                  f"(analysis/TARGET.md):\n"
                  f"  rpcscope capture --turns --kernel-only-runs --transport {','.join(transports)} "
                  f"--proc {args.proc} --sizes {','.join(map(str, sizes))} --calls {args.calls} "
                  f"--warmup {args.warmup} --placement {args.placement} --out {both} "
                  f"&& rpcscope analyze {both} && rpcscope rtp {both}\n"
                  f"  rpcscope crosscheck {both}")
    return 0
