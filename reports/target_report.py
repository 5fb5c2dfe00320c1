"""`rpcscope report` of a run of an RPC rpcscope did not write (`rpcscope run --target`): report.md,
index.html and tables.json under the run's report/, from analysis/kernelonly.json alone.

    from rpcscope.reports.target_report import build_target, write_target
    rep = build_target("runs/target-...")       # a Report (reports/objects.py)
    write_target(rep, "runs/target-.../report")  # report.md, index.html, tables.json

The first screen: per transport, one row per size with the calls matched (and why the rest were not),
the kernel-only median RTT beside the program's own median, and the largest steps. Then, folded, each
case's step table (K1..K11 and the steps beside the path), its matching figures and its uprobes.
tables.json is the machine-readable twin: every table's title, columns, rows and source.
"""
from __future__ import annotations

import json
from pathlib import Path

from rpcscope.rundir import KERNELONLY_FORMAT, TARGET_FORMAT, RunDir

from .model_section import param_rows
from .objects import Report, Section, Table
from .render import to_html, to_markdown

TABLES_JSON = "tables.json"
TABLES_FORMAT = "rpcscope-report-tables/1"

FIRST_COLUMNS = ["size", "round", "calls matched", "unmatched (why)", "RTT p50 µs kernel-only", "program p50 µs",
                 "kernel-only vs program", "call RTT p50 µs (its --uprobe)", "call vs program", "between calls p50 µs",
                 "largest steps (mean µs, share of RTT)"]
STEP_COLUMNS = ["step", "name", "DCE", "p10 µs", "p50 µs", "mean µs", "p90 µs", "share", "events p50",
                "corrected p50 µs", "absent calls", "missing calls"]
PROBE_COLUMNS = ["size", "program p50 µs traced", "untraced p50s µs (before, after)", "probe effect µs",
                 "events a call", "ns an event", "cost from", "corrected RTT p50 µs", "untraced program p50 µs"]
MATCH_COLUMNS = ["item", "value"]
MODEL_PARAM_COLUMNS = ["unit cost", "value", "unit", "one count is"]
MODEL_ROW_COLUMNS = ["size", "kind", "path µs", "rounds' spread %", "model µs", "model %", "left out of its fit %",
                     "interpolation %", "line %", "program µs", "path vs program %", "bytes request/reply"]
INTRO = ("Where does the time of one call go, seen from the kernel alone? The program runs unmodified; each "
         "request is paired with its reply on the other host from the kernel's send, receive, scheduler and "
         "device events, and each call's round trip is cut into the steps K1..K11 the kernel bounds "
         "(tracepoints/steps.toml [[target_steps]]), which add up to its kernel-only RTT: from the client's first "
         "send of the request to the return of its receive that takes the reply's last byte. The program's own "
         "median (its client's clock) holds also the client's user space before the send and after the receive "
         "('between calls' is a reply's receive to the next send). A --uprobe at the client's call function "
         "measures that too: the call's edges KC1 (its entry to the first send) and KC2 (the last receive to its "
         "return) then join the path, and the call's RTT runs from the function's entry to its return.")


class TargetReportError(Exception):
    """A target run the report cannot read: one line naming what to do."""


def _read(path, again):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TargetReportError(f"{path} is not there: {again}") from None
    except (OSError, ValueError) as e:
        raise TargetReportError(f"{path}: unreadable ({e}): {again}") from None


def load_target(run):
    """(target.json, kernelonly.json) of a target run; TargetReportError where one is missing or foreign."""
    rd = RunDir(run)
    target = _read(rd.target_json, "re-run `rpcscope run --target ...`")
    if target.get("format") != TARGET_FORMAT:
        raise TargetReportError(f"{rd.target_json}: format {target.get('format')!r}, this rpcscope reads "
                                f"{TARGET_FORMAT}")
    doc = _read(rd.kernelonly_json, f"the run's analysis is missing: re-run `rpcscope run --target "
                                    f"{target.get('target')} ...`")
    if doc.get("format") != KERNELONLY_FORMAT:
        raise TargetReportError(f"{rd.kernelonly_json}: format {doc.get('format')!r}, this rpcscope reads "
                                f"{KERNELONLY_FORMAT}")
    return target, doc


def _unmatched(c):
    why = {**c.get("program_unmatched", {})}
    return "; ".join(f"{n} {r}" for r, n in why.items()) or "none"


def _largest(c):
    by = {x["id"]: x for x in c["steps"]}
    return "; ".join(f"{i} {by[i]['name']} {by[i]['mean_us']:.1f} ({by[i]['share_%']:.0f} %)" for i in c["largest"])


def first_row(c):
    """One case's row of the first screen (a dict keyed by FIRST_COLUMNS)."""
    vs = c.get("rtt_vs_program_%")
    return {"size": c["size"], "round": c.get("round", 1), "calls matched": f"{c['calls']} of {c['program_calls']} "
                                                f"({c['program_calls_matched_%']:.2f} %)",
            "unmatched (why)": _unmatched(c), "RTT p50 µs kernel-only": c["rtt_p50_us"],
            "program p50 µs": c["program_p50_us"], "kernel-only vs program": "" if vs is None else f"{vs:+.1f} %",
            "call RTT p50 µs (its --uprobe)": _blank(c.get("call_rtt_p50_us")),
            "call vs program": "" if c.get("call_rtt_vs_program_%") is None else f"{c['call_rtt_vs_program_%']:+.1f} %",
            "between calls p50 µs": c["between_calls_p50_us"], "largest steps (mean µs, share of RTT)": _largest(c)}


def _blank(v):
    """A cell: v, or empty where there is no figure."""
    return "" if v is None else v


def _step_rows(c):
    return [{"step": x["id"], "name": x["name"], "DCE": ", ".join(x["dce"]), "p10 µs": x["p10_us"],
             "p50 µs": x["p50_us"], "mean µs": x["mean_us"], "p90 µs": x["p90_us"],
             "share": "beside" if x["share_%"] is None else f"{x['share_%']:.1f} %",
             "events p50": _blank(x.get("events_p50")), "corrected p50 µs": _blank(x.get("corrected_p50_us")),
             "absent calls": x["absent_calls"], "missing calls": x["missing_calls"]} for x in c["steps"]]


def probe_row(c):
    """One case's row of the probe effect table (a dict keyed by PROBE_COLUMNS); None for an analysis
    that predates the probe calibration."""
    p = c.get("probe")
    if not p:
        return None
    return {"size": c["size"], "program p50 µs traced": p["traced_program_p50_us"],
            "untraced p50s µs (before, after)": ", ".join(f"{x:.1f}" for x in p["untraced_program_p50s_us"])
            or "not run", "probe effect µs": _blank(p["probe_effect_us"]), "events a call": p["events_per_call"],
            "ns an event": _blank(p["ns_per_event"]),
            "cost from": p["cost_source"] + ("" if p["calibrates"] else f" (this case: {p['why_not']})"),
            "corrected RTT p50 µs": _blank(p["corrected_rtt_p50_us"]),
            "untraced program p50 µs": _blank(p["untraced_program_p50_us"])}


def _match_rows(c):
    rows = [("the program's calls matched", f"{c['calls']} of {c['program_calls']}"),
            ("the program's calls unmatched, why", _unmatched(c)),
            ("all exchanges matched", f"{c['matched']} of {c['exchanges']} ({c['matched_%']:.2f} %)"),
            ("exchanges unmatched, why", "; ".join(f"{n} {r}" for r, n in c["unmatched"].items()) or "none"),
            ("set-up and warm-up exchanges", c["setup_exchanges"]),
            ("the protocol's own exchanges", c["protocol_exchanges"]),
            ("exchanges on other sockets", "; ".join(f"{n} {r}" for r, n in c["other_sockets"].items()) or "none"),
            ("exchanges a call", c["exchanges_per_call"]),
            ("calls whose path does not add up", c["calls_whose_path_does_not_sum"]),
            ("calls with a kernel event missing", c["calls_with_missing_events"])]
    return [{"item": k, "value": v} for k, v in rows]


def _model_row(r):
    return {"size": r["size"], "kind": r["kind"], "path µs": _blank(r["measured_us"]),
            "rounds' spread %": _blank(r.get("spread_pct")), "model µs": r["model_us"],
            "model %": _blank(r["error_pct"]), "left out of its fit %": _blank(r["cv_error_pct"]),
            "interpolation %": _blank(r["interp_error_pct"]), "line %": _blank(r["line_error_pct"]),
            "program µs": _blank(r["program_us"]), "path vs program %": _blank(r["path_vs_program_pct"]),
            "bytes request/reply": f"{r['request_bytes']}/{r['reply_bytes']}"}


def _model_section(run, name):
    """The target model of each transport (analysis/targetmodel-T.json): unit costs and every size's row."""
    sec = Section(f"The model: {name}'s path from a few unit costs (analysis/TARGET.md, the model)", folded=False)
    for path in sorted(RunDir(run).analysis.glob("targetmodel-*.json")):
        try:
            m = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise TargetReportError(f"{path}: unreadable ({e}): `rpcscope model {run}` writes it again") from None
        t, src = m["transport"], f"analysis/{path.name}"
        sec.items.append(f"{t.upper()} {m['proc']}: path {m['path']}; measured: {m['measured']}; program: "
                         f"{m['program']}. Fitted at {', '.join(map(str, m['fitted']))}.")
        sec.items.append(Table(f"{name} {t.upper()}: unit costs", MODEL_PARAM_COLUMNS,
                               param_rows(m), f"{src} params[]"))
        sec.items.append(Table(f"{name} {t.upper()}: path, model and baselines per size (% error: path less "
                               f"calculated, over path)", MODEL_ROW_COLUMNS, [_model_row(r) for r in m["rows"]],
                               f"{src} rows[]"))
    return sec


def build_target(run) -> Report:
    target, doc = load_target(run)
    name = target["target"]
    cases = doc["cases"]
    src = "analysis/kernelonly.json"
    first = Section(f"Where does the time go? {name}, kernel events only", folded=False)
    first.items.append(INTRO)
    if target.get("left_out"):
        first.items.append("Left out: " + "; ".join(target["left_out"]) + ".")
    if doc.get("not_analyzed"):
        first.items.append("Captured, not analyzed: " + "; ".join(f"{f['case']}: {f['why']}"
                                                                   for f in doc["not_analyzed"]) + ".")
    for t in sorted({c["transport"] for c in cases}, key=lambda t: (t != "udp", t)):
        tc = sorted((c for c in cases if c["transport"] == t), key=lambda c: (c["size"], c.get("round", 1)))
        first.items.append(Table(
            f"{name} {t.upper()} {target.get('proc', '')}: calls matched, RTT and the largest steps",
            FIRST_COLUMNS, [first_row(c) for c in tc],
            f"{src} cases[transport={t}].{{size, calls, program_calls, program_calls_matched_%, program_unmatched, "
            f"rtt_p50_us, program_p50_us, rtt_vs_program_%, call_rtt_p50_us, call_rtt_vs_program_%, "
            f"between_calls_p50_us, largest, steps[].mean_us, "
            f"steps[].share_%}}"))
        prows = [r for r in (probe_row(c) for c in tc) if r]
        if prows:
            first.items.append(Table(
                f"{name} {t.upper()}: what recording cost the calls (analysis/TARGET.md, the probe effect)",
                PROBE_COLUMNS, prows, f"{src} cases[transport={t}].probe"))
        for c in tc:
            if c["exchanges_per_call"] > 1.05:
                first.items.append(f"{t.upper()} {c['size']} B: {c['exchanges_per_call']:.2f} exchanges a call: the "
                                   f"program's calls take more than one request and reply; the kernel-only path "
                                   f"and RTT are those of one exchange, not of a call.")
    steps = Section("Steps of each case (K1..K11 on the round trip, KC1 and KC2 at its edges with a call probe, "
                    "KO1 and KO2 beside it)", fold_items=True)
    match = Section("Matching: how each request was paired with its reply", fold_items=True)
    probes = Section("uprobes")
    for c in sorted(cases, key=lambda c: (c["transport"], c["size"], c.get("round", 1))):
        label = f"{c['transport'].upper()} {c['size']} B ({c['case']})"
        steps.items.append(Table(f"Steps, {label}", STEP_COLUMNS, _step_rows(c),
                                 f"{src} cases[case={c['case']}].steps[]; every call: analysis/kernelonly-calls.csv"))
        match.items.append(Table(f"Matching, {label}", MATCH_COLUMNS, _match_rows(c), f"{src} cases[case={c['case']}]"))
        if c.get("uprobes"):
            probes.items.append(Table(f"uprobes, {label}", list(c["uprobes"][0]), c["uprobes"],
                                      f"{src} cases[case={c['case']}].uprobes[]"))
    model = _model_section(run, name)
    sections = [first] + ([model] if model.items else []) + [steps, match] + ([probes] if probes.items else [])
    head = {"run": str(run), "target": name, "proc": target.get("proc"), "cases": len(cases),
            "first_screen": [{"transport": c["transport"], **first_row(c)} for c in cases]}
    return Report(str(run), sections, head)


def write_target(rep: Report, out_dir) -> dict:
    """report.md, index.html and tables.json (every table's twin) in out_dir; their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(rep.run).name
    (out / "report.md").write_text(to_markdown(rep, name))
    (out / "index.html").write_text(to_html(rep, name))
    tables = [{"title": t.title, "columns": t.columns, "rows": t.rows, "source": t.source} for t in rep.tables()]
    (out / TABLES_JSON).write_text(json.dumps({"format": TABLES_FORMAT, "run": rep.run, "tables": tables}, indent=1))
    return {"dir": str(out), "html": str(out / "index.html"), "markdown": str(out / "report.md"),
            "tables": str(out / TABLES_JSON), "figures": []}
