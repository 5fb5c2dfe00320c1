"""`rpcscope analyze runs/NAME`: per-step completion times of a captured run."""
import argparse
import pathlib
import sys

from rpcscope.output import UserError, emit_json, table
from rpcscope.rundir import RPCS_TABLE, RTT_CSV, STEPS_JSON, RunDir

from .clocksync import summary_line
from .kernelonly_out import analyze_run, run_json
from .rpcs import CALL_BEGIN_MARK, CALL_END_MARK
from .run import RunError
from .steps import analyze
from .tracenotes import TraceNote, note_line

EPILOG = """examples:
  rpcscope analyze runs/maxarg-udp                  step x size table of medians, traced vs untraced RTT
  rpcscope analyze runs/maxarg-udp --stat p90       the same with p90s
  rpcscope analyze runs/maxarg-udp --corrected      medians corrected for the probe effect
  rpcscope analyze runs/maxarg-udp --json           everything as JSON (also in runs/NAME/analysis/)
  rpcscope analyze runs/x --no-kernel               user marks only (kernel-bounded steps: missing)
  rpcscope analyze runs/x --workers 1               everything in one process (default: one per CPU)
  rpcscope analyze runs/target-libtirpc             a run of `run --target`: its kernel-only analysis again

Writes runs/NAME/analysis/steps.csv (one row per case and step: n, mean, median,
p10, p90, p99, std in us, corrected mean and median, tracepoints inside, missing
RPCs by reason), rtt.csv, steps.json and rpcs.jsonl.gz (every RPC's time in
each step). Decoded traces are cached in
runs/NAME/analysis/cache/; the cases are decoded and rebuilt in one forked
worker per CPU. "n/a": the run's conditions rule the step out;
"-": applies but not measured (see missing_reasons). Rules: analysis/rpcs.py.
"""


class _Progress:
    def __init__(self, out=None):
        self.out = out or sys.stderr  # resolved per call: sys.stderr may be replaced after import
        self.tty = self.out.isatty()

    def __call__(self, k, ncases, case_id, done, total, what=None):
        """Case k of ncases, done of total RPCs; what: the whole label instead (cases in workers)."""
        if not self.tty:
            return
        frac = (k + (done / total if total else 0)) / max(ncases, 1)
        bar = "#" * int(frac * 30)
        label = what or f"case {k + 1}/{ncases} {case_id} " + (f"{done}/{total} RPCs" if total else "reading traces")
        self.out.write(f"\ranalyze [{bar:<30}] {frac * 100:3.0f}%  {label}      ")
        self.out.flush()

    def done(self):
        if self.tty:
            self.out.write("\r" + " " * 100 + "\r")
            self.out.flush()


def _fmt(v):
    return "" if v is None else v


def cmd_analyze(args):
    path = pathlib.Path(args.run)
    if RunDir(path).is_target:                       # a capture of `rpcscope run --target`: kernel events only
        summaries, _ = analyze_run(path, quiet=args.json)
        if args.json:
            emit_json(run_json(path, summaries))
        return 0
    prog = None if args.quiet else _Progress()
    try:
        res = analyze(path, progress=prog, kernel=not args.no_kernel, workers=args.workers)
    except RunError as e:
        raise UserError(str(e)) from None
    finally:
        if prog:
            prog.done()
    res.pop("_rpcs", None)
    kos = [RunDir(d) for d in RunDir(path).kernel_only_runs()]
    for ko in kos:
        if ko.target_json.exists():                  # capture --kernel-only-runs: the kernel-only runs too
            summaries, _ = analyze_run(ko.path, quiet=True)
            res.setdefault("kernel_only_runs", []).append({"dir": str(ko.path), "cases": len(summaries)})
    notes = [TraceNote(**n) for n in res.get("trace_problems") or []]
    if args.json:
        emit_json(res)
        for n in notes:                  # stdout holds the JSON alone
            print("trace problem: " + note_line(n), file=sys.stderr)
        return 0
    if res.get("partial"):
        print(f"PARTIAL ANALYSIS: {_partial_why(res)}")
    key = ("corrected_median_us" if args.stat == "median" else "corrected_mean_us") if args.corrected \
        else f"{args.stat}_us"
    cases = []
    for d in res["steps"]:
        if d["case"] not in cases:
            cases.append(d["case"])
    by = {(d["case"], d["step"]): d for d in res["steps"]}
    steps = list(dict.fromkeys(d["step"] for d in res["steps"]))
    rows = []
    for s in steps:
        r = {"step": s, "name": by[(cases[0], s)]["name"][:34]}
        for c in cases:
            d = by[(c, s)]
            v = "n/a" if d["status"] == "n/a" else ("-" if d[key] is None else f"{d[key]:.2f}")
            r[c] = v + ("*" if d["missing"] and d["status"] != "n/a" else " ")
        rows.append(r)
    print(f"{res['run']}: {key.replace('_us', '')} completion time per step, us "
          f"(kernel: {res['kernel_collector']}, placement {res['placement']}, wait {res['wait']}, "
          f"executors {res['server_executors']}; * some RPCs missing the step)")
    _pivot(rows, ["step", "name"] + cases)
    print()
    rt = [{"case": d["case"], "rpcs": d["rpcs"], "complete": d["complete_rpcs"],
           "traced_p50": _r(d["traced_rtt_median_us"]),
           "corrected_p50": _r(d["corrected_rtt_median_us"]), "untraced_p50": _r(d["untraced_p50_us"]),
           "traced_%": _r(d["traced_vs_untraced_pct"], 1), "corrected_%": _r(d["corrected_vs_untraced_pct"], 1)}
          for d in res["rtt"]]
    how = sorted({d["corrected_by"] for d in res["rtt"] if d.get("corrected_by")})
    print(f"round trip, us (traced: {CALL_BEGIN_MARK}..{CALL_END_MARK} from the trace; untraced: the manifest's p50; "
          f"% = difference to untraced; corrected: the probe cost of {' / '.join(how) or 'nothing'} taken off)")
    table(rt, ["case", "rpcs", "complete", "traced_p50", "corrected_p50", "untraced_p50", "traced_%", "corrected_%"])
    if not res["calibrated"]:
        print("no calibration in the manifest: corrected = raw (capture with --calibration quick|full)")
    print("clock sync: " + summary_line(res.get("clock_sync")))
    for ko in res.get("kernel_only_runs") or []:
        print(f"kernel-only runs: {ko['cases']} case(s) analysed in {ko['dir']} "
              f"(`rpcscope analyze {ko['dir']}` prints them)")
    if res.get("kernel_only_runs"):
        print(f"`rpcscope crosscheck {path}` sets the kernel-only steps beside these (after `rpcscope rtp {path}`)")
    for f in (res.get("clock_sync") or {}).get("flagged") or []:
        print(f"  FLAGGED {f['case']}: {f['flag']}")
    missing = {}
    for d in res["steps"]:
        for why, n in (d["missing_reasons"] or {}).items():
            missing[(d["step"], why)] = missing.get((d["step"], why), 0) + n
    excl = {}
    for d in res["rtt"]:
        for why, n in d["excluded"].items():
            excl[why] = excl.get(why, 0) + n
    if excl:
        print("left out: " + "; ".join(f"{w}: {n}" for w, n in excl.items()))
    if missing:
        print("\nmissing (step: reason: RPCs, all cases; 'complete' RPCs miss none):")
        for (s, why), n in sorted(missing.items(), key=lambda x: -x[1])[:12]:
            print(f"  {s}: {why}: {n}")
    if notes:
        print(f"\ntrace problems ({len(notes)}; the intact streams are analysed, steps.json trace_problems):")
        for n in notes:
            print("  " + note_line(n))
    if res.get("partial"):
        print(f"PARTIAL ANALYSIS: {_partial_why(res)}")
    print(f"\nwritten: {RunDir(path).steps_csv}, {RTT_CSV}, {STEPS_JSON}, {RPCS_TABLE}")
    return 0


def _partial_why(res):
    skipped = res.get("skipped_cases") or []
    why = "the capture was interrupted" if res.get("interrupted") else "the capture did not finish every case"
    if res.get("capture_note"):
        why = res["capture_note"]
    return (f"{why}; {len(skipped)} case(s) left out ({', '.join(skipped[:6])}{' ...' if len(skipped) > 6 else ''}); "
            f"the figures are those of the {len(res.get('rtt') or [])} finished case(s)")


def _pivot(rows, cols):
    w = [max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols]
    print("  ".join(c.ljust(x) if i < 2 else c.rjust(x) for i, (c, x) in enumerate(zip(cols, w))))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print("  ".join(str(r[c]).ljust(x) if i < 2 else str(r[c]).rjust(x) for i, (c, x) in enumerate(zip(cols, w))))


def _positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def _r(v, nd=2):
    return "" if v is None else round(v, nd)


def register(subparsers):
    ap = subparsers.add_parser(
        "analyze", help="per-step completion times of a captured run (per payload size), traced vs untraced RTT",
        description="Rebuild every RPC of a run from its user and kernel traces and report each catalog "
                    "step's completion time per payload size.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="runs/NAME",
                    help="a run directory made by `rpcscope capture` (or by `rpcscope run --target`)")
    ap.add_argument("--stat", choices=["median", "mean", "p10", "p90", "p99", "std"], default="median",
                    help="statistic shown in the table (default median; files hold all of them)")
    ap.add_argument("--corrected", action="store_true", help="show durations corrected for the probe effect")
    ap.add_argument("--no-kernel", action="store_true", help="ignore the kernel trace (user marks only)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--workers", type=_positive, metavar="N",
                    help="processes the cases are spread over (default one per CPU; 1: all in this process, "
                         "decoding in threads ahead of it)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.set_defaults(func=cmd_analyze)
    return ap
