"""The kernel-only analysis's outputs for a run of a target (`rpcscope run --target`): the step cost
tables and matching figures (analysis/kernelonly.json), every call's path (analysis/kernelonly-calls.csv)
and the first screen, as text (report/first-screen.txt).

    summaries, results = analyze_run(rundir)         # every case of a target run; writes the outputs (a case
                                                     # that cannot be analyzed is named, the others go on)
    summary = summarize(res, point(res), cost)       # dict: one case's tables (kernelonly_probe: point, cost)
    write(rundir, [summary, ...], [CaseResult, ...])
    print(first_screen(summary))
    doc = run_json(rundir, summaries)                # the --json of run --target and analyze
"""
import csv
import json
import statistics

from rpcscope.output import UserError
from rpcscope.rundir import KERNELONLY_FORMAT, RunDir
from rpcscope.tracepoints.targetsteps import edges, on_path, target_steps

from .kernelonly import PATH_IDS, analyze_case
from .kernelonly_probe import corrected, costs, point
from .targetmodel import case_input
from .targetmodel_cli import print_model, run_models

LARGEST = 3
EDGE_IDS = tuple(s.id for s in edges())


def _in_path_order():
    """The target steps as a call runs them: KC1, K1..K11, KC2, then those beside the path."""
    before, after = edges()
    return (before, *on_path(), after, *(s for s in target_steps() if not s.rtp and not s.edge))


def _dce(ids):
    """DCE step ids, runs of consecutive ones shortened: C1,C2,C3 -> C1-C3."""
    out, run = [], []
    for d in list(ids) + [None]:
        if run and d and d[:1] == run[-1][:1] and d[1:].isdigit() and run[-1][1:].isdigit() \
                and int(d[1:]) == int(run[-1][1:]) + 1:
            run.append(d)
            continue
        if run:
            out.append(run[0] if len(run) < 3 else f"{run[0]}-{run[-1]}")
            out.extend(run[1:] if len(run) == 2 else [])
        run = [d] if d else []
    return ",".join(out)


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0


def _us(v):
    return round(v / 1e3, 3) if v is not None else None


def summarize(res, pt, cost):
    """One case's figures (a dict, as kernelonly.json holds it); pt, cost: its probe calibration point and
    the cost it is corrected with (analysis/kernelonly_probe.py)."""
    calls = res.calls
    rtts = [c.rtt for c in calls]
    mean_rtt = statistics.fmean(rtts) if rtts else 0.0
    c_ns = cost.ns_per_event if cost else None
    fixed = [corrected(c, c_ns) for c in calls] if c_ns is not None else None
    edged = [c for c in calls if c.edges]
    # The shares are of the path's mean: the kernel's K1..K11, and the call's edges where a probe measures them.
    mean_path = mean_rtt + sum(statistics.fmean(c.edges[e.id] for c in edged) for e in edges()) if edged \
        else mean_rtt
    steps = []
    for s in _in_path_order():
        if s.edge and not edged:
            continue
        vals = [c.edges[s.id] for c in edged] if s.edge else [c.steps[s.id] if s.rtp else c.overlap[s.id]
                                                              for c in calls]
        cvals = [f[s.id] for f in fixed] if fixed is not None and s.rtp else None
        evs = [c.events.get(s.id, 0) for c in calls] if s.rtp else None
        side = "server" if s.id in ("K3", "K4") else "client" if s.id in ("K9", "K10") else None
        absent = sum(1 for c in calls if side and not c.slept[side]) if side else 0
        missing = sum(1 for c in calls if any(m.startswith(_missing_side(s.id)) for m in c.missing)) \
            if _missing_side(s.id) else 0
        steps.append({"id": s.id, "name": s.name, "dce": list(s.dce), "side": s.side, "rtp": s.rtp or bool(s.edge),
                      "unit": s.unit, "phase": s.phase,
                      "p50_us": round(_pct(vals, 0.5) / 1e3, 3), "mean_us": round(statistics.fmean(vals) / 1e3, 3)
                      if vals else 0.0, "p10_us": round(_pct(vals, 0.1) / 1e3, 3),
                      "p90_us": round(_pct(vals, 0.9) / 1e3, 3),
                      "share_%": round(100 * statistics.fmean(vals) / mean_path, 1)
                      if vals and mean_path and (s.rtp or s.edge) else None,
                      "events_p50": _pct(evs, 0.5) if evs else None,
                      "events_mean": round(statistics.fmean(evs), 2) if evs else None,
                      "corrected_p50_us": _us(_pct(cvals, 0.5)) if cvals else None,
                      "corrected_mean_us": _us(statistics.fmean(cvals)) if cvals else None,
                      "absent_calls": absent, "missing_calls": missing})
    on_path = [x for x in steps if x["rtp"]]
    largest = [x["id"] for x in sorted(on_path, key=lambda x: -x["mean_us"])[:LARGEST]] if calls else []
    total = res.exchanges
    p50 = _pct(rtts, 0.5) / 1e3
    gaps = [c.gap_after for c in calls if c.gap_after >= 0]
    gap = _pct(gaps, 0.5) / 1e3
    bad_sums = sum(1 for c in calls if sum(c.steps.values()) != c.rtt or min(c.steps.values()) < 0
                   or (c.edges and min(c.edges.values()) < 0))
    call_p50 = _pct([c.call_rtt for c in edged], 0.5) / 1e3 if edged else None
    return {"case": res.case_id, "target": res.target, "transport": res.transport, "size": res.size,
            "round": res.round,
            "exchanges": total, "matched": res.matched,
            "matched_%": round(100 * res.matched / total, 2) if total else 0,
            "unmatched": res.unmatched, "other_sockets": res.others, "setup_exchanges": res.setup,
            "protocol_exchanges": res.control,
            "program_calls_matched_%": round(100 * len(calls) / res.program_calls, 2) if res.program_calls else 0,
            "program_unmatched": res.program_unmatched,
            "calls": len(calls), "program_calls": res.program_calls, "exchanges_per_call": res.per_call,
            "rtt_p50_us": round(p50, 3), "rtt_mean_us": round(mean_rtt / 1e3, 3),
            "program_p50_us": round(res.program_p50_us, 3),
            "rtt_vs_program_%": round(100 * (p50 - res.program_p50_us) / res.program_p50_us, 1)
            if res.program_p50_us else None,
            "call_probe": res.call_probe or None, "calls_with_edges": len(edged),
            "call_rtt_p50_us": round(call_p50, 3) if call_p50 is not None else None,
            "call_rtt_vs_program_%": round(100 * (call_p50 - res.program_p50_us) / res.program_p50_us, 1)
            if call_p50 is not None and res.program_p50_us else None,
            "between_calls_p50_us": round(gap, 3),
            "rtt_with_between_calls_vs_program_%": round(100 * (p50 + gap - res.program_p50_us) / res.program_p50_us, 1)
            if res.program_p50_us else None,
            "calls_with_missing_events": sum(1 for c in calls if c.missing),
            "calls_whose_path_does_not_sum": bad_sums, "largest": largest, "steps": steps, "uprobes": res.uprobes,
            "model_input": case_input(res, fixed),
            "probe": _probe(pt, cost, [sum(f.values()) for f in fixed] if fixed is not None else None)}


def _probe(pt, cost, fixed_rtts):
    """The case's probe calibration and correction, as kernelonly.json holds it."""
    un = pt.untraced_p50s_us
    return {"untraced_program_p50s_us": [round(x, 3) for x in un],
            "traced_program_p50_us": round(pt.traced_p50_us, 3),
            "probe_effect_us": round(pt.delta_us, 3) if pt.delta_us is not None else None,
            "events_per_call": pt.events_per_call, "calibrates": not pt.why_not, "why_not": pt.why_not,
            "ns_per_event": round(cost.ns_per_event, 1) if cost and cost.ns_per_event is not None else None,
            "cost_source": cost.source if cost else "none",
            "corrected_rtt_p50_us": _us(_pct(fixed_rtts, 0.5)) if fixed_rtts else None,
            "untraced_program_p50_us": round(statistics.fmean(un), 3) if un else None}


def _missing_side(sid):
    return {"K2": "server net", "K3": "server", "K8": "client net", "K9": "client"}.get(sid, "")


def analyze_run(rundir, quiet=False):
    """Analyze every case of a target run directory: (summaries, results); writes the outputs and,
    unless quiet, prints each case's first screen."""
    rd = RunDir(rundir)
    cases = sorted(p for p in (rd.path / "cases").iterdir() if (p / "case.json").exists()) \
        if (rd.path / "cases").is_dir() else []
    if not cases:
        raise UserError(f"{rundir}: no captured target case; run `rpcscope run --target ...` first")
    results, failed = [], []
    for c in cases:                              # a case that cannot be analyzed leaves the others be
        try:
            results.append(analyze_case(c))
        except UserError as e:
            failed.append({"case": c.name, "why": str(e)})
    if not results:
        raise UserError("no case could be analyzed: " + "; ".join(f"{f['case']}: {f['why']}" for f in failed))
    points = [point(r) for r in results]
    cost = costs(points)
    summaries = [summarize(r, p, cost[r.case_id]) for r, p in zip(results, points)]
    paths = write(rundir, summaries, results, failed)
    models, notes = run_models(rundir, summaries)
    paths += tuple(rd.analysis / f"targetmodel-{m.transport}.json" for m in models)
    for old in rd.analysis.glob("targetmodel-*.json"):     # a transport that has no model any more
        if old not in paths:
            old.unlink()
    if not quiet:
        for s in summaries:
            print()
            print(first_screen(s))
        for m in models:
            print()
            print_model(m)
        for n in notes:
            print(f"model: {n}")
        for f in failed:
            print(f"\nrpcscope: {f['case']} - not analyzed: {f['why']}")
        print(f"\nwritten: {', '.join(map(str, paths))}")
    return summaries, results


def run_json(rundir, summaries):
    """`--json` of a target run's analysis: its cases, those not analyzed and its models, as written."""
    rd = RunDir(rundir)
    doc = json.loads(rd.kernelonly_json.read_text())
    return {"run": str(rundir), "cases": summaries, "not_analyzed": doc.get("not_analyzed", []),
            "models": [json.loads(p.read_text()) for p in sorted(rd.analysis.glob("targetmodel-*.json"))]}


def write(rundir, summaries, results, failed=()):
    """kernelonly.json and kernelonly-calls.csv in the run directory's analysis/, the first screens in its
    report/first-screen.txt; their paths. failed: [{"case", "why"}] of the cases not analyzed."""
    rd = RunDir(rundir)
    rd.analysis.mkdir(parents=True, exist_ok=True)
    jpath, cpath = rd.kernelonly_json, rd.kernelonly_csv
    jpath.write_text(json.dumps({"format": KERNELONLY_FORMAT, "cases": summaries, "not_analyzed": list(failed)},
                                indent=1))
    rd.report.mkdir(exist_ok=True)
    spath = rd.first_screen_txt
    spath.write_text("\n\n".join([first_screen(s) for s in summaries]
                                  + [f"rpcscope: {f['case']} - not analyzed: {f['why']}" for f in failed]) + "\n")
    with open(cpath, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "call", "socket", "t0_ns", "rtt_ns", *PATH_IDS, "KO1", "KO2", *EDGE_IDS,
                    "call_rtt_ns", "server_slept", "client_slept", "missing"])
        for res in results:
            for c in res.calls:
                w.writerow([res.case_id, c.index, c.socket, c.t[0], c.rtt, *(c.steps[s] for s in PATH_IDS),
                            c.overlap["KO1"], c.overlap["KO2"], *(c.edges.get(e, "") for e in EDGE_IDS),
                            "" if c.call_rtt is None else c.call_rtt, int(c.slept["server"]),
                            int(c.slept["client"]), ";".join(c.missing)])
    return jpath, cpath, spath


def _probe_line(p):
    """The first screen's line on the probe effect and its correction."""
    if not p:
        return None
    if not p["untraced_program_p50s_us"]:
        return "  probe effect    not measured: this capture has no untraced runs (capture it again)"
    un = ", ".join(f"{x:.1f}" for x in p["untraced_program_p50s_us"])
    line = (f"  probe effect    the program's p50 {p['traced_program_p50_us']:.1f} us traced, {un} us untraced "
            f"before and after: {p['probe_effect_us']:+.1f} us for {p['events_per_call']:g} recorded events a call")
    if p["ns_per_event"] is None:
        return line + f"; no correction ({p['cost_source']})"
    if p["corrected_rtt_p50_us"] is None:
        return line + f"; {p['ns_per_event']:.0f} ns an event ({p['cost_source']}), no matched call to correct"
    return (line + f"; corrected at {p['ns_per_event']:.0f} ns an event ({p['cost_source']}): kernel-only RTT p50 "
            f"{p['corrected_rtt_p50_us']:.1f} us against the untraced program's {p['untraced_program_p50_us']:.1f} us"
            + ("" if p["calibrates"] else f"; this case does not calibrate: {p['why_not']}"))


def _rtt_line(s):
    """The first screen's RTT line: the call's RTT where a probe encloses the calls, and the kernel's."""
    if s["rtt_vs_program_%"] is None:
        return ""
    if not s["calls"]:
        return f"  RTT p50         none: no call matched; {s['program_p50_us']:.1f} us as the program measured it"
    if s.get("call_rtt_p50_us") is None:
        return (f"  RTT p50         {s['rtt_p50_us']:.1f} us kernel-only; {s['program_p50_us']:.1f} us as the program "
                f"measured it ({s['rtt_vs_program_%']:+.1f} %; the client's user space before its first send and "
                f"after its last receive is not seen: --uprobe CALL_FUNCTION:call adds it as KC1, KC2)")
    return (f"  RTT p50         {s['call_rtt_p50_us']:.1f} us from {s['call_probe']}'s entry to its return "
            f"({s['calls_with_edges']} calls); {s['program_p50_us']:.1f} us as the program measured it "
            f"({s['call_rtt_vs_program_%']:+.1f} %); the kernel's part {s['rtt_p50_us']:.1f} us (first send to last "
            f"receive, {s['rtt_vs_program_%']:+.1f} %)")


def first_screen(s):
    """The first screen of one case, as text."""
    by = {x["id"]: x for x in s["steps"]}
    lines = [f"rpcscope: {s['target']} {s['transport'].upper()} {s['case']} - kernel events only, the program "
             f"unmodified",
             f"  calls matched   {s['calls']} of the program's {s['program_calls']} calls "
             f"({s['program_calls_matched_%']:.2f} %)"
             + (f"; unmatched: {', '.join(f'{n} {r}' for r, n in s['program_unmatched'].items())}"
                if s["program_unmatched"] else ""),
             f"  all exchanges   {s['matched']} of {s['exchanges']} matched ({s['matched_%']:.2f} %; set-up and "
             f"warm-up {s['setup_exchanges']}"
             + (f", the protocol's own {s['protocol_exchanges']}" if s["protocol_exchanges"] else "")
             + (f", other sockets {sum(s['other_sockets'].values())}" if s["other_sockets"] else "") + ")"
             + (f"; unmatched: {', '.join(f'{n} {r}' for r, n in s['unmatched'].items())}" if s["unmatched"] else ""),
             f"  NOTE            {s['exchanges_per_call']:.2f} exchanges a call on the program's connection: its "
             f"calls take more than one request and reply (window acknowledgements, fragments); the kernel-only "
             f"path and RTT here are those of one exchange, not of a call" if s["exchanges_per_call"] > 1.05 else None,
             _rtt_line(s),
             f"  between calls   {s['between_calls_p50_us']:.1f} us p50 in the client's user space from a reply's "
             f"receive to the next send (the program's RTT holds part of it: kernel-only RTT + this is "
             f"{s['rtt_with_between_calls_vs_program_%']:+.1f} % off its median)"
             if s["rtt_with_between_calls_vs_program_%"] is not None and s["calls"] else None,
             "  largest steps   " + ("; ".join(
                 f"{i} {by[i]['name']} {by[i]['mean_us']:.1f} us ({by[i]['share_%']:.0f} %)" for i in s["largest"])
                                     or "none: no call of the program matched (the reasons above)"),
             f"  path adds up    {s['calls'] - s['calls_whose_path_does_not_sum']} of {s['calls']} calls; "
             f"{s['calls_with_missing_events']} with a kernel event missing",
             _probe_line(s.get("probe")),
             "",
             f"  {'step':<4} {'name':<36} {'DCE':<14} {'p50 us':>8} {'mean us':>8} {'share':>6} {'events':>6} "
             f"{'corr p50':>8}"]
    for x in s["steps"]:
        share = f"{x['share_%']:.0f} %" if x["share_%"] is not None else "beside"
        ev = f"{x['events_p50']:g}" if x.get("events_p50") is not None else ""
        cp = f"{x['corrected_p50_us']:.2f}" if x.get("corrected_p50_us") is not None else ""
        lines.append(f"  {x['id']:<4} {x['name'][:36]:<36} {_dce(x['dce'])[:14]:<14} {x['p50_us']:>8.2f} "
                     f"{x['mean_us']:>8.2f} {share:>6} {ev:>6} {cp:>8}")
    for u in s.get("uprobes", []):
        line = (f"  uprobe {u['step']} ({u['symbol']}): {u['where']}, {u['calls_with_it']} of {u['calls']} calls, "
                f"p50 {u['per_call_p50_us']} us a call")
        if u["call_rtt_p50_us"] is not None:
            line += (f"; before the first send {u['before_first_send_p50_us']} us, after the last receive "
                     f"{u['after_last_receive_p50_us']} us; its entry to return {u['call_rtt_p50_us']} us p50 "
                     f"({u['call_rtt_vs_program_%']:+.1f} % off the program's median)")
        lines.append(line)
    return "\n".join(line for line in lines if line is not None)
