"""`rpcscope report runs/NAME`: report.md and a self-contained index.html of one run."""
import argparse
from pathlib import Path

from rpcscope.analysis.export import SUFFIX, export_examples
from rpcscope.output import UserError, emit_json
from rpcscope.rundir import RunDir

from .data import ReportError, load
from .report import build, write
from .target_report import TargetReportError, build_target, write_target

PERCENT_ERROR = ("% error = (Measured − Calculated) × 100 / Measured, the DCE study's sign: positive where the "
                 "model is under")

EPILOG = """examples:
  rpcscope analyze runs/maxarg-udp && rpcscope model runs/maxarg-udp && rpcscope report runs/maxarg-udp
  rpcscope report runs/maxarg-udp                 writes runs/maxarg-udp/report/{report.md,index.html,fig-*.svg}
  rpcscope report runs/maxarg-udp --per-rpc       also per-RPC traced RTT histograms (analysis/rpcs.jsonl.gz)
  rpcscope report runs/maxarg-udp --out /tmp/r --json
  rpcscope report runs/maxarg-udp --no-calls      without report/calls/ (each diagram's call as a Perfetto trace)
  rpcscope report runs/target-libtirpc            a run of `rpcscope run --target`: report.md, index.html and
                                                  tables.json (every table's figures) from analysis/kernelonly.json

The report reads runs/NAME/manifest.json and, when there, analysis/steps.json (rpcscope analyze),
analysis/model.json and model-*.json (rpcscope model; `rpcscope run` writes one per transport, each
its own table and verdict, then a verdict over them all) and analysis/rtp.json (the measured round trip path; without it
the RTP diagrams use the catalog's rtp flags and say so). Every table and figure names its source
file and columns. The same figures in Jupyter: reports/notebooks/rpcscope.ipynb (RPCSCOPE_RUN=runs/NAME).
"""


def cmd_target_report(args):
    """The report of a run of `rpcscope run --target`: its first screen from analysis/kernelonly.json."""
    try:
        rep = build_target(args.run)
    except TargetReportError as e:
        raise UserError(str(e)) from None
    out = write_target(rep, args.out or RunDir(args.run).report)
    if args.json:
        emit_json({**out, "summary": rep.headline})
        return 0
    h = rep.headline
    print(f"report: {out['html']}")
    print(f"        {out['markdown']}, {out['tables']} (every table as JSON)")
    print(f"run {h['run']}: {h['target']} {h['proc']}, {h['cases']} cases, kernel events only")
    for r in h["first_screen"]:
        rnd = f" round {r['round']}" if r["round"] != 1 else ""
        print(f"  {r['transport']} {r['size']}{rnd}: calls matched {r['calls matched']}, "
              f"unmatched {r['unmatched (why)']}; "
              f"RTT p50 {r['RTT p50 µs kernel-only']:.1f} us kernel-only, {r['program p50 µs']:.1f} us the "
              f"program's ({r['kernel-only vs program']})"
              + (f", {r['call RTT p50 µs (its --uprobe)']:.1f} us from the call's --uprobe ({r['call vs program']})"
                 if r["call RTT p50 µs (its --uprobe)"] != "" else "")
              + f"; largest {r['largest steps (mean µs, share of RTT)']}")
    return 0


def cmd_report(args):
    if RunDir(args.run).is_target:
        return cmd_target_report(args)
    try:
        d = load(args.run, per_rpc=args.per_rpc)
    except ReportError as e:
        raise UserError(str(e)) from None
    out_dir = Path(args.out or RunDir(args.run).report)
    calls_dir = out_dir / "calls"
    for f in calls_dir.glob(f"*{SUFFIX}"):
        f.unlink()
    calls, call_errors = ({}, {}) if args.no_calls else export_examples(d, calls_dir)
    rep = build(d, calls, call_errors)
    out = write(rep, out_dir)
    out["calls"] = [str(e.path) for e in calls.values()]
    if args.json:
        emit_json({**out, "summary": rep.headline})
        return 0
    h = rep.headline
    print(f"report: {out['html']}")
    print(f"        {out['markdown']} ({len(out['figures'])} figures)")
    if calls:
        print(f"        {calls_dir}/ ({len(calls)} example calls as Perfetto traces)")
    for case, why in call_errors.items():
        print(f"  {case}: example call not exported: {why}")
    print(f"run {h['run']}: {h['cases']} cases; analysis {'yes' if h['analysis'] else 'no'}, "
          f"model {'yes' if h['model'] else 'no'}, "
          f"round trip path {'measured' if h['rtp_measured'] else 'catalog flags'}")
    for r in h["rtt"]:
        t, u = r["traced_p50_us"], r["untraced_p50_us"]
        print(f"  {r['case']}: traced p50 {t:.2f} us, untraced p50 {u:.2f} us" if t and u
              else f"  {r['case']}")
    errors = h.get("models_percent_error") or {"": h.get("model_percent_error") or {}}
    if any(e is not None for errs in errors.values() for e in errs.values()):
        print(f"  ({PERCENT_ERROR})")
    for t, errs in errors.items():
        for z, e in errs.items():
            if e is not None:
                print(f"  model{f' ({t})' if t else ''} at size {z}: {e:+.2f} % error")
    for m in h["missing"]:
        print(f"missing: {m}")
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "report", help="write a run's report: report.md and a self-contained index.html with SVG figures",
        description="Write runs/NAME/report/: first, where the time goes (per transport, each size's Measured "
                    "RTT split into client CPU, server CPU, wake-ups and network, the probe effect beside it, "
                    "the model's % error and its baselines); then, folded, the run summary, the Table-2-style model "
                    "table, per-step costs, "
                    "round-trip-path diagrams (Figure 5 style), RTT vs size with packet boundaries, latency "
                    "distributions, traced vs untraced.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="runs/NAME", help="a run directory (rpcscope capture), ideally analysed")
    ap.add_argument("--out", metavar="DIR", help="where to write (default runs/NAME/report)")
    ap.add_argument("--per-rpc", action="store_true",
                    help="per-RPC traced RTT distributions, from the per-RPC table `rpcscope analyze` writes")
    ap.add_argument("--no-calls", action="store_true",
                    help="do not export each case's example call as a Perfetto trace (report/calls/)")
    ap.add_argument("--json", action="store_true", help="print the written paths and a summary as JSON")
    ap.set_defaults(func=cmd_report)
    return ap
