"""`rpcscope rtp runs/NAME`: the measured round-trip path per RPC and per size."""
import argparse
import pathlib
import sys

from rpcscope.output import UserError, emit_json

from .probe import in_situ
from .rpcs import CALL_FIRST, CALL_LAST, CALL_ROW
from .rtp import analyze_rtp
from .run import RunError

EPILOG = """examples:
  rpcscope rtp runs/maxarg-udp                 per size: the steps on the measured round-trip path
                                               (share of RPCs, median us on the path) and the slack
                                               of the overlapped ones
  rpcscope rtp runs/maxarg-udp --case udp-maxarg-0 --rpc 0
                                               one RPC's path, segment by segment
  rpcscope rtp runs/maxarg-udp --json          everything as JSON (also runs/NAME/analysis/rtp.json)
  rpcscope model runs/maxarg-udp               the RTT model then fits its unit costs to this path's
                                               class times (analysis/MODEL.md)

The walk (analysis/rtp.py) goes back from the client's call end to its call begin
over the kernel's execution graph (analysis/graph.py): running time belongs to
the step the thread is in, a blocked thread hands over through the wake-up that
ended its block (to the softirq or thread that woke it), a softirq through the
packet it received (skbaddr) to the sender. The segments sum to the traced RTT.
Needs the kernel trace (rpcscope capture --kernel perf|lttng).
"""


class _Progress:
    def __init__(self, out=None):
        # Resolve the stream now, not at import: a default bound at import time
        # outlives a replaced (and closed) sys.stderr.
        self.out = out or sys.stderr
        self.tty = self.out.isatty()

    def __call__(self, k, n, case_id, done, total):
        if self.tty:
            self.out.write(f"\rrtp: case {k + 1}/{n} {case_id} {done}/{total} RPCs      ")
            self.out.flush()

    def done(self):
        if self.tty:
            self.out.write("\r" + " " * 80 + "\r")


def _us(v):
    return "" if v is None else f"{v / 1000:.2f}"


def _grid(rows, cols):
    w = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
    print("  ".join(c.ljust(x) if i == 0 else c.rjust(x) for i, (c, x) in enumerate(zip(cols, w))))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(x) if i == 0 else str(r.get(c, "")).rjust(x)
                        for i, (c, x) in enumerate(zip(cols, w))))


def cmd_rtp(args):
    path = pathlib.Path(args.run)
    prog = None if args.quiet or args.json else _Progress()
    try:
        res = analyze_rtp(path, progress=prog, per_rpc=args.rpc is not None or args.per_rpc, calibrate=in_situ)
    except RunError as e:
        raise UserError(str(e)) from None
    finally:
        if prog:
            prog.done()
    cases = [c for c in res["cases"] if not args.case or c["case"] == args.case]
    if args.case and not cases:
        raise UserError(f"no case {args.case!r} (cases: {', '.join(c['case'] for c in res['cases'])})")
    if args.json:
        emit_json(dict(res, cases=cases), out=sys.stdout)
        return 0
    if args.rpc is not None:
        c = cases[0]
        if not 0 <= args.rpc < len(c.get("per_rpc", [])):
            raise UserError(f"--rpc {args.rpc}: case {c['case']} has {len(c.get('per_rpc', []))} walked RPCs")
        p = c["per_rpc"][args.rpc]
        print(f"{c['case']} RPC {args.rpc} (call id {p['call_id']:#x}): RTT {p['rtt_ns'] / 1000:.2f} us, "
              f"sum of path segments {p['sum_ns'] / 1000:.2f} us")
        _grid([{"segment": lab, "from_us": _us(off), "us": _us(d)} for lab, off, d, *_ in p["segments"]],
              ["segment", "from_us", "us"])
        print("\noverlapped (off the path): step, time off the path, slack (us)")
        _grid([{"step": k, "off_us": _us(v[0]), "slack_us": _us(v[1])} for k, v in p["slack"].items()],
              ["step", "off_us", "slack_us"])
        return 0
    names = [c["case"] for c in cases]
    segs = []
    for c in cases:
        for r in c["path"]:
            if r["segment"] not in segs:
                segs.append(r["segment"])
    by = {(c["case"], r["segment"]): r for c in cases for r in c["path"]}
    rows = []
    for s in segs:
        row = {"segment": s, "dce": ""}
        for c in names:
            r = by.get((c, s))
            row[c] = "" if r is None else f"{r['median_ns'] / 1000:.2f} ({r['on_path_frac'] * 100:.0f}%)"
            if r and r.get("catalog_rtp"):
                row["dce"] = "rtp"
            elif r and r["step"]:
                row["dce"] = row["dce"] or "off"
        rows.append(row)
    print(f"{res['run']}: the measured round-trip path, median us on the path per RPC "
          f"(% of RPCs with the segment on it); dce: the DCE study's Figure 5 (rtp/off)")
    _grid(rows, ["segment", "dce"] + names)
    tot = {"segment": f"{CALL_ROW} {CALL_FIRST}..{CALL_LAST} (median)", "dce": ""}
    chk = {"segment": "max |sum - RTT|, us", "dce": ""}
    prb = {"segment": "probes on the path (median)", "dce": ""}
    ovl = {"segment": "  of which overlap absorbs", "dce": ""}
    edg = {"segment": "+ call edges (client clock)", "dce": ""}
    cor = {"segment": "corrected RTT (median)", "dce": ""}
    unt = {"segment": "untraced RTT (p50)", "dce": ""}
    pct = {"segment": "corrected vs untraced, %", "dce": ""}
    for c in cases:
        tot[c["case"]] = _us(c["rtt_median_ns"])
        chk[c["case"]] = _us(c["sum_check_max_abs_ns"])
        prb[c["case"]] = _us(c.get("probe_on_path_median_ns"))
        ovl[c["case"]] = _us((c.get("probe_retimed") or {}).get("absorbed_median_ns"))
        edg[c["case"]] = _us(c.get("call_edges_ns"))
        cor[c["case"]] = _us(c.get("rtt_corrected_median_ns"))
        u = c.get("untraced_p50_ns")
        unt[c["case"]] = _us(u)
        pct[c["case"]] = (f"{(c['rtt_corrected_median_ns'] - u) * 100 / u:+.1f}"
                          if u and c.get("rtt_corrected_median_ns") is not None else "")
    _grid([tot, chk, prb, ovl, edg, cor, unt, pct], ["segment", "dce"] + names)
    splits = [(c["case"], c.get("probe_split")) for c in cases if c.get("probe_split")]
    if splits:
        print("\nper-step probe charges (an event's direct cost in its own step, the rest spread over the path "
              "in proportion to time; analysis/rtp.py probe_split):")
        for cid, sp in splits:
            print(f"  {cid}: " + "; ".join(
                f"{k} event {v['event_ns']:.0f} ns, {v['direct_ns']:.0f} in place ({v['direct_from']})" if v else
                f"{k} events charged in place" for k, v in sp.items()))
    if cases and not all(c.get("probe_costs") for c in cases):
        print("no probe calibration in the manifest: corrected = traced (capture with --calibration quick|full)")
    print("\noverlapped steps: median slack us (min) -- how much the step could grow before joining the path")
    steps = []
    for c in cases:
        for r in c["overlapped"]:
            if r["step"] not in steps:
                steps.append(r["step"])
    ob = {(c["case"], r["step"]): r for c in cases for r in c["overlapped"]}
    orows = []
    for s in steps:
        row = {"step": s}
        for c in names:
            r = ob.get((c, s))
            row[c] = "" if r is None else f"{_us(r['slack_median_ns'])} ({_us(r['slack_min_ns'])})"
        orows.append(row)
    _grid(orows, ["step"] + names)
    probs = {}
    for c in cases:
        for k, v in c["problems"].items():
            probs[k] = probs.get(k, 0) + v
    if probs:
        print("\nwalk problems: " + "; ".join(f"{k}: {v}" for k, v in probs.items()))
    print("\nLinux vs DCE:")
    for n in res["notes"]:
        print("  - " + n)
    print(f"\nwritten: {path / 'analysis' / 'rtp.json'}")
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "rtp", help="the measured round-trip path of every RPC: steps on it, overlapped steps and their slack",
        description="Walk each RPC's round-trip path backwards over the kernel's execution graph (wake-ups, "
                    "softirqs, packets) and report, per payload size, which steps lie on it and how much slack "
                    "the overlapped ones have.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="runs/NAME", help="a run directory made by `rpcscope capture` (with a kernel trace)")
    ap.add_argument("--case", help="only this case (e.g. udp-maxarg-0)")
    ap.add_argument("--rpc", type=int, metavar="N",
                    help="print the N-th walked RPC's path (with --case, or the first case)")
    ap.add_argument("--per-rpc", action="store_true", help="with --json: every RPC's segments and slack")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    ap.set_defaults(func=cmd_rtp)
    return ap
