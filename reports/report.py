"""`rpcscope report runs/NAME`: report.md and a self-contained index.html under runs/NAME/report/.

    from rpcscope.reports.report import build, write
    rep = build(load("runs/NAME"))     # sections: tables and SVG figures, each with its source
    write(rep, "runs/NAME/report")     # report.md, index.html, fig-*.svg

The figures and tables are the same objects the notebook (reports/notebooks/rpcscope.ipynb) shows.
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path

from rpcscope import packets as P
from rpcscope.analysis.run import modes_label, path_shape, traced_noise_pct, untraced_modes
from rpcscope.packets import request_body_bytes
from rpcscope.tracepoints import SPLIT, STEPS, side_of, side_step, span_of, split_of

from . import crosscheck_section, first_screen as FS, svg, verify_section
from .data import PCTS, RunData
from .model_section import items as model_section_items, percent_errors
from .objects import Figure, Report, Section, Table
from .render import to_html, to_markdown

__all__ = ["Figure", "Report", "Section", "Table", "build", "to_html", "to_markdown", "write"]

_CALL_ROW = span_of("call")          # the RTT row: the call's span of user marks (the catalog's [spans])

def _f(v, nd=2):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _case_key(r):
    return (r.get("transport"), r.get("proc"), int(r.get("size", 0)))


# ------------------------------------------------------------------ sections


FIRST_INTRO = (
    "Where does the time of one remote procedure call go? Each bar is one request size's Measured round trip "
    "(the build without tracepoints, its median call), split along the round-trip path of the traced calls with "
    "the tracepoints' own cost taken out: CPU time on the client, CPU time on the server, waking a sleeping thread "
    "(wake-ups), and the network (wire and queueing). The grey stretch is the part of Measured the path does not "
    "explain; where the path is longer than Measured it is negative, drawn red and dashed from the path's end back "
    "to Measured (the black tick). The hatched stretch beyond the bar is the probe effect removed: what recording "
    "the tracepoints added to the traced calls (traced − corrected); it is not part of Measured.")
ERRORS_NOTE = (
    "model %, interp %, line %: (Measured − Calculated) × 100 / Measured, the DCE study's sign (positive where "
    "the calculation is short, so that they read as the study's Table 2 does) for the model and two baselines: "
    "linear interpolation between the fitted sizes' "
    "Measured, and a line A + B × bytes + C × packets through them. kind: fitted sizes set the model's unit "
    "costs; a predicted size takes nothing measured at that size. not explained: Measured − the path's sum; "
    "probe removed: traced − corrected.")


def first_screen_section(d: RunData):
    """Where does the time go: per transport, one sentence from the data, the stacked bars and the
    table of their figures with the model's % error beside its baselines."""
    s = Section("Where does the time go?", folded=False)
    s.items.append(FIRST_INTRO)
    hosts = FS.hosts_rows(d)
    if hosts:
        s.items.append(Table("Hosts", FS.HOSTS_COLUMNS, hosts,
                             "manifest.json hosts, kernel_collectors, clock, testbed"))
    sync = FS.sync_sentence(d)
    if sync:
        s.items.append(sync + " (analysis/steps.json clock_sync)")
    vs = FS.views(d)
    if not vs:
        s.items.append("No measured round-trip path and no model file yet: run `rpcscope analyze`, `rpcscope rtp` "
                       "and `rpcscope model` on this run.")
    for v in vs:
        s.items.append(v.sentence)
        unsided = sorted({u for b in v.bars for u in b.unsided})
        if v.bars:
            s.items.append(Figure(f"bars-{v.transport}", f"Where the time goes, {v.transport.upper()}",
                                  FS.bar_chart(v), v.source,
                                  ("Segments with no side of their own (" + ", ".join(unsided) + ") count as CPU "
                                   "time of the side before them on the path.") if unsided else ""))
        errs = FS.error_chart(v)
        if errs:
            s.items.append(Figure(f"errors-{v.transport}", f"% error, {v.transport.upper()}", errs,
                                  f"analysis/{v.model_file} rows[].error_pct, interp_error_pct, line_error_pct",
                                  "The DCE study's sign: positive where the calculation is short."))
        s.items.append(Table(f"Where the time goes, {v.transport.upper()} (µs; model and baselines in % error)",
                             FS.error_columns(), FS.table_rows(v),
                             v.source + (f"; model %, interp %, line %: analysis/{v.model_file} rows[].error_pct, "
                                         "interp_error_pct, line_error_pct" if v.model_file else
                                         "; no model file for this transport: `rpcscope model RUN --transport "
                                         f"{v.transport}` writes one"), ERRORS_NOTE))
    return s


def summary_section(d: RunData):
    s = Section("Run summary")
    s.items.append("What was run, on which machines and how: each row names the output it is read from.")
    s.items.append(Table("Run", ["item", "value", "source"], d.summary, "manifest.json (and analysis/steps.json), "
                         "per row in the source column"))
    if d.missing:
        s.items.append("Not in this run yet: " + "; ".join(d.missing) + ".")
    return s


def model_section(d: RunData):
    s = Section("Round-trip time model")
    s.items.append("The model calculates each size's round trip from a few costs per unit of work (a call, a "
                   "packet, a wake-up, a byte copied...) times how many of each the protocol does; set beside the "
                   "Measured time, its % error says how much of the round trip those few costs explain.")
    s.items.extend(model_section_items(d.models, Table, str))
    return s


STEP_COLS = ["step", "name", "rtp", "status", "n", "median_us", "p10_us", "p90_us", "corrected_median_us",
             "corrected_mean_us", "missing"]


CLOCK_CHECK_NOTE = (
    "A one-mark-pair step with no code (C1-C4, C20) comes out near -20 to -35 ns: the clock figure holds its own "
    "read. The spans C7-C9, C14-C17 and S8-S10 hold the other side's work too (on veth the receiver's protocol "
    "input runs inside the sender's sendmsg; the client's wait holds the server's whole call), whose probes the "
    "step tables charge to the CPU they ran on, not to the span: there the difference is the step tables' "
    "charging, not the model's (which walks the round-trip path). RTT: the path's corrected RTT "
    "(rtp.json) against the clock build's c1_begin..c21_end, which holds ~45 reads.")


def clock_check_tables(steps, rtp=None):
    """Per transport: each step's probe-corrected median less the clock build's (ns), per size, where
    the capture made clock reads (capture --clock-reads): how far the probe correction leaves a step
    from what a clock read each side of it measures. The RTT row's corrected figure is the round-trip
    path's (rtp: rtp.json's rtt_corrected_median_ns), not the step table's RTT row, which charges every
    event on the client's CPU and the server's during the waits."""
    path = {c.get("case"): c["rtt_corrected_median_ns"] / 1000 for c in (rtp or {}).get("cases", [])
            if c.get("rtt_corrected_median_ns") is not None}
    out = []
    for t in sorted({r["transport"] for r in steps}):
        mine = [r for r in steps if r["transport"] == t and r.get("clock_reads_median_us") is not None
                and r.get("corrected_median_us") is not None]
        if not mine:
            continue
        sizes = sorted({r["size"] for r in mine})
        names = list(dict.fromkeys(r["step"] for r in mine))
        rows = []
        for n in names:
            diff = {r["size"]: 1000 * ((path.get(r.get("case")) or r["corrected_median_us"]) if n == _CALL_ROW else
                                       r["corrected_median_us"]) - 1000 * r["clock_reads_median_us"]
                    for r in mine if r["step"] == n}
            row = {"step": n, **{str(z): (f"{diff[z]:+.0f}" if z in diff else "") for z in sizes}}
            row["median |diff| ns"] = f"{statistics.median(abs(v) for v in diff.values()):.0f}"
            rows.append(row)
        out.append(Table(f"Probe-corrected minus clock reads, {t.upper()} "
                         "(ns; each clock figure holds one ~20 ns read)",
                         ["step"] + [str(z) for z in sizes] + ["median |diff| ns"], rows,
                         "analysis/steps.json steps[].corrected_median_us - clock_reads_median_us "
                         "(RTT: analysis/rtp.json cases[].rtt_corrected_median_ns)", CLOCK_CHECK_NOTE))
    return out


def steps_section(d: RunData):
    s = Section("Per-step costs", fold_items=True)
    s.items.append("A step is the stretch of a call between two tracepoints (C1-C22 on the client, S1-S16 on the "
                   "server, as the DCE study numbers them), measured on every call of the traced build. Recording a "
                   "tracepoint takes time itself: this probe effect (the run summary's calibration row gives its "
                   "cost per event) is inside every traced figure, and the corrected columns take it out.")
    if not d.steps:
        s.items.append(f"No analysis/steps.json: run `rpcscope analyze {d.path}`.")
        return s
    s.items.append("Per call: per-fragment and per-window steps are the per-call sum of their occurrences. "
                   "Corrected = minus the calibrated cost of the tracepoints inside the step: where a tracepoint "
                   "costs the call more than the emptiest step holding one of its class takes, that step's time "
                   "is charged to its own step and the rest is taken off every step in proportion to its time "
                   "(per case below). "
                   "n/a: the run's conditions rule the step out; missing: RPCs where the step applies but was not "
                   "found.")
    clock = clock_check_tables(d.steps, d.rtp)
    if clock:
        s.items.append("The clock build is the same program with each tracepoint replaced by one read of the clock "
                       "into memory (about 20 ns where a tracepoint costs hundreds): its step times are the steps "
                       "with almost no probe. The tables below set each probe-corrected step beside it, in ns per "
                       "size: near zero, the correction takes out what the tracepoints add; a large figure on a "
                       "span that holds the other side's work is the step tables' charging, as the note under "
                       "each table says.")
    s.items.extend(clock)
    by = {}
    for r in d.steps:
        by.setdefault(r["case"], []).append(r)
    rtt = {r.get("case"): r for r in (d.steps_json or {}).get("rtt", [])}
    for case, rows in by.items():
        out = [{"step": r["step"], "name": r["name"], "rtp": {True: "yes", False: "", None: "(row)"}[r.get("rtp")],
                "status": r["status"], "n": r["n"], "median_us": _f(r["median_us"]), "p10_us": _f(r["p10_us"]),
                "p90_us": _f(r["p90_us"]), "corrected_median_us": _f(r["corrected_median_us"]),
                "corrected_mean_us": _f(r["corrected_mean_us"]), "missing": r["missing"] or "",
                "clock_reads_median_us": _f(r.get("clock_reads_median_us"))} for r in rows]
        cols = STEP_COLS[:-1] + ["clock_reads_median_us"] + STEP_COLS[-1:] \
            if any(r.get("clock_reads_median_us") is not None for r in rows) else STEP_COLS
        s.items.append(Table(f"Case {case}", cols, out,
                             f"analysis/steps.json steps[case={case}] columns {', '.join(cols[1:])} "
                             "(also analysis/steps.csv)"))
        clock = (rtt.get(case) or {}).get("clock_reads")
        if clock and clock.get("error"):
            s.items.append(f"Clock reads ({case}): none: {clock['error']}")
        elif clock:
            s.items.append(f"Clock reads ({case}): the clock build's run of this size (each step mark one clock read, "
                           "~20 ns, inside every figure; capture --clock-reads), "
                           f"RTT p50 {clock['client_p50_us']:.2f} us, "
                           f"{clock['marks']} marks, {clock['dropped']} dropped. Source: analysis/steps.json "
                           f"rtt[case={case}].clock_reads, steps[].clock_reads_median_us")
        split = (rtt.get(case) or {}).get("probe_split")
        if split:
            s.items.append(f"Corrected ({case}): each user event charged {split['user_beyond_ns']:.0f} ns less "
                           "than its "
                           "calibrated cost to its own step, "
                           f"each kernel event {split['kernel_beyond_ns']:.0f} ns less; "
                           "that rest taken off every step's remaining time "
                           f"(x {split['factor_median']:.3f}, the median "
                           f"call). Source: analysis/steps.json rtt[case={case}].probe_split")
    return s


# --------------------------------------------------- RTP diagrams


def _lane(step, given=None):
    if given in svg.LANES:
        return given
    return side_of(step) or "network"


# The parts of the split sends off the DCE study's round-trip path (on a virtual link the wire's time).
_OFF_PATH_PARTS = "/".join(name for name, part in SPLIT.items() if not part["rtp"])


def _catalog_boxes(case_rows, packets_note):
    """Boxes from the catalog's rtp flags and the step medians (not a measured path)."""
    med = {r["step"]: r for r in case_rows}
    cat = {st["id"]: st for st in STEPS}

    def us(sid):
        r = med.get(sid)
        return r.get("median_us") if r else None

    def applies(sid):
        r = med.get(sid)
        return r is None or r["status"] != "n/a"

    def phase(p):
        return [x for x in cat if cat[x]["phase"] == p]

    # The catalog's phases in Figure 5's order; a phase's steps off the path are drawn beside its send.
    groups = [("client", phase("request")), ("network", ["request"]), ("server", phase("serve")),
              ("network", ["reply"]), ("client", phase("reply"))]
    boxes, t = [], 0.0
    anchor = {side: side_step(side, "sendmsg") for side in ("client", "server")}
    side_over = {side: [x for x in phase(cat[a]["phase"]) if not cat[x]["rtp"]] for side, a in anchor.items()}
    for lane, ids in groups:
        for sid in ids:
            if lane == "network":
                boxes.append({"lane": "network", "label": f"{sid} {packets_note.get(sid, '')}".strip(),
                              "us": None, "begin": t, "rtp": True,
                              "tip": f"{sid}: in flight (not measured; a virtual link's wire time is inside "
                                     f"{_OFF_PATH_PARTS})"})
                continue
            if not cat[sid]["rtp"] or not applies(sid):
                continue
            u = us(sid) or 0.0
            boxes.append({"lane": lane, "label": f"{sid} {cat[sid]['name']}", "us": us(sid), "begin": t, "rtp": True,
                          "step": sid})
            t += u
            if sid == anchor.get(lane):
                t2 = t
                for o in side_over[lane]:
                    if not applies(o):
                        continue
                    uo = us(o) or 0.0
                    boxes.append({"lane": lane, "label": o, "us": us(o), "begin": t2, "rtp": False, "step": o,
                                  "tip": f"{o} {cat[o]['name']}: {uo:.2f} µs (overlapped)"})
                    t2 += uo
    return boxes


def _segment_lane(label, step):
    if step:
        return _lane(step)
    return "client" if label.startswith("client") else "server" if label.startswith("server") else "network"


def _example_boxes(entry):
    """Boxes of rtp.json's example_rpc (one real call at the median corrected RTT): its path segments at
    their traced times, then the overlapped steps beside their lane, with their slack."""
    names = {st["id"]: st["name"] for st in STEPS}
    ex = entry["example_rpc"]
    boxes = []
    for g in ex["segments"]:
        sid = g.get("step")
        us, probe = g["dur_ns"] / 1e3, g.get("probe_ns", 0.0) / 1e3
        label = f"{sid} {names.get(sid, '')}".strip() if sid else g["segment"]
        boxes.append({"lane": _segment_lane(g["segment"], sid), "label": label, "us": us,
                      "begin": g["begin_ns"] / 1e3, "rtp": True, "step": sid,
                      "tip": f"{label}: {us:.2f} µs traced, {us - probe:.2f} µs without the probes inside it"})
    on_path = {g.get("step") for g in ex["segments"]}
    for o in entry.get("overlapped") or []:
        if o["step"] in on_path or not o.get("rpcs_with_overlap") or \
                o.get("fully_overlapped_rpcs", 0) * 2 < o["rpcs_with_overlap"]:
            continue
        sid, lane = o["step"], _lane(o["step"])
        u = o["off_path_median_ns"] / 1e3
        slack = o.get("slack_median_ns")
        # It starts where its side's preceding step ends (on the path or itself overlapped; C8 is the
        # last of C8', C8'').
        prev = _before(sid)
        ends = [b["begin"] + b["us"] for b in boxes
                if prev and b["label"].split()[0].split(" (")[0] in (prev, *split_of(prev))]
        if not ends:
            continue
        begin = max(ends)
        boxes.append({"lane": lane, "label": sid + (f" (slack {slack / 1e3:.1f})" if slack is not None else ""),
                      "us": u, "begin": begin, "rtp": False, "step": sid,
                      "tip": f"{sid} {names.get(sid, '')}: {u:.2f} µs off the path (median)"
                             + (f", slack {slack / 1e3:.2f} µs" if slack is not None else "")})
    return boxes


def _before(step):
    """The catalog step that precedes `step` on its side (where an overlapped step starts)."""
    side_of = {st["id"]: st["side"] for st in STEPS}
    if step not in side_of:
        return None
    same = [sid for sid, side in side_of.items() if side == side_of[step]]
    k = same.index(step)
    return same[k - 1] if k else None


def _rtp_entry(rtp, case):
    """rtp.json's entry of this case: cases[] keyed by the case id alone (a size names one case per
    transport and procedure, so it never picks an entry)."""
    for e in (rtp or {}).get("cases") or []:
        if e.get("case") == case.get("id"):
            return e
    return None


def _packets_note(proc, size):
    body = request_body_bytes(proc, size)
    if body is None:
        return {}
    q = P.Message(body)
    return {"request": f"({len(q.frags)} frag, {len(q.ip)} IP pkt)", "reply": ""}


def rtp_section(d: RunData, calls=None, call_errors=None):
    """One diagram per case, drawn from that case's own entry in rtp.json (cases[case=ID]); calls:
    {case id: export.Exported} of the example calls exported beside the report, linked under each."""
    calls, call_errors = calls or {}, call_errors or {}
    s = Section("Round trip path (Figure 5 style)", fold_items=True)
    s.items.append("Each diagram is one real call of its case, the one whose probe-corrected round trip is the "
                   "median: time runs down, the client, network and server columns hold its steps, solid boxes "
                   "lie on the round trip path (each waits for the one before), dashed ones ran beside it. "
                   "The link under a diagram is the same call as a Perfetto trace: open it in ui.perfetto.dev "
                   "(Open trace file) to see every step, kernel event, packet and wake-up of the call on its "
                   "threads.")
    cases = [c for c in d.cases if c.get("complete", True) is not False]
    by_case = {}
    for r in d.steps:
        by_case.setdefault(r["case"], []).append(r)
    for c in cases:
        entry = _rtp_entry(d.rtp, c) if d.rtp else None
        data = {"case": c["id"]}
        if entry and entry.get("example_rpc"):
            boxes = _example_boxes(entry)
            ex = entry["example_rpc"]
            data["call-id"] = ex["call_id"]
            sub = (f"measured: call {ex['call_id']}, {ex['rtt_ns'] / 1e3:.1f} µs traced, "
                   f"{ex['corrected_rtt_ns'] / 1e3:.1f} µs without the probes (the median)")
            src = (f"analysis/rtp.json cases[case={c['id']}].example_rpc (segments), overlapped (steps off the "
                   "path, slack)")
        else:
            boxes = _catalog_boxes(by_case.get(c["id"], []), _packets_note(c.get("proc"), int(c.get("size", 0))))
            sub = "catalog flags, not measured" + (" (rtp.json has no example_rpc: re-run `rpcscope rtp`)"
                                                   if entry else "")
            src = ("the step catalog's rtp flags (which steps are on the path); box times: analysis/steps.json "
                   f"steps[case={c['id']}].median_us" + ("" if by_case.get(c["id"]) else " (absent: no analysis)"))
        svgs = svg.rtp_diagram(boxes, f"Round trip path, {c['id']} ({c.get('proc')}, {c.get('size')} bytes)", sub,
                               data=data)
        ex = calls.get(c["id"])
        links = [(f"call {ex.calls[0]} (id {ex.call_ids[0]}) as a Perfetto trace", f"calls/{ex.path.name}")] \
            if ex and ex.call_ids[:1] == [data.get("call-id")] else []
        note = ("Box heights proportional to time with a minimum height so short steps stay legible; "
                "solid: on the round trip path, dashed: overlapped.")
        if c["id"] in call_errors:
            note += f" The call was not exported: {call_errors[c['id']]}."
        s.items.append(Figure(f"rtp-{c['id']}", f"RTP {c['id']}", svgs, src, note, case=c["id"], links=links))
    return s


# --------------------------------------------------- RTT vs size


def packet_marks(proc, max_size):
    """[(size, label)] where one more byte of request costs one more IP packet or fragment."""
    body = (lambda z: request_body_bytes(proc, z)) if request_body_bytes(proc, 0) is not None else (lambda z: z)
    marks, prev = [], None
    for z in range(0, int(max_size) + 1):
        b = body(z)
        cur = (P.frag_count(b), P.request_packets(b))
        if prev and cur != prev:
            what = "fragment" if cur[0] != prev[0] else "IP packet"
            n = cur[0] if what == "fragment" else cur[1]
            marks.append((z, f"{z - 1}/{z} ({what} {n}; body {body(z - 1)}/{b})"))
        prev = cur
    return marks


def _short_mark(z, label):
    """A boundary's label on the plot: "IP packet 2: 1389" of "1388/1389 (IP packet 2; body 1392/1396)"."""
    m = re.search(r"\((fragment|IP packet) (\d+)", label)
    return f"{m.group(1)} {m.group(2)}: {z}" if m else str(z)


def rtt_section(d: RunData):
    s = Section("RTT vs request size")
    s.items.append("Each size's round trip three ways: untraced (the build without tracepoints, what an application "
                   "sees: the Measured figure), traced (every tracepoint recording) and traced with the probe "
                   "effect taken out (probe-corrected). The gap between traced and untraced is the probe effect; "
                   "the corrected curve lies on the untraced one where the correction is right.")
    groups = {}
    if d.rtt:
        for r in d.rtt:
            groups.setdefault((r["transport"], r["proc"]), []).append(r)
        src = ("analysis/steps.json rtt[].traced_rtt_median_us, corrected_rtt_median_us, untraced_p50_us "
               "(also analysis/rtt.csv)")
    else:
        for c in d.cases:
            groups.setdefault((c.get("transport"), c.get("proc")), []).append(
                {"size": c.get("size"),
                 "traced_rtt_median_us": ((c.get("traced") or {}).get("p50") or 0) / 1000 or None,
                 "corrected_rtt_median_us": None,
                 "untraced_p50_us": ((c.get("untraced") or {}).get("p50") or 0) / 1000 or None})
        src = "manifest.json cases[].traced.p50 (client-measured), cases[].untraced.p50"
    # The probe-corrected RTT of record is the round-trip path's (rtp.json: each RPC's probes on its path,
    # with the in-situ costs); steps.json's (the case's events on the path per call times the same costs,
    # or without an in-situ calibration every probe on the client's CPU) stands in without an rtp.json.
    path_corr, noise, absorbed, anchors = {}, {}, {}, {}
    for c in (d.rtp or {}).get("cases", []) if isinstance((d.rtp or {}).get("cases"), list) else []:
        if c.get("rtt_corrected_median_ns") is not None:
            path_corr[c["case"]] = c["rtt_corrected_median_ns"] / 1000
        if (c.get("probe_retimed") or {}).get("absorbed_median_ns") is not None:
            absorbed[c["case"]] = c["probe_retimed"]["absorbed_median_ns"] / 1000
    shapes, modes = {}, {}
    for c in d.cases:
        noise[c.get("id")] = traced_noise_pct(c)
        shapes[c.get("id")] = path_shape(c) or {}
        modes[c.get("id")] = modes_label(untraced_modes(d.path, c))
    if path_corr:
        src += "; corrected: analysis/rtp.json cases[].rtt_corrected_median_ns (probes on the round-trip path)"
        for rows in groups.values():
            for r in rows:
                cid = r.get("case")
                if cid in path_corr:
                    r["corrected_rtt_median_us"] = path_corr[cid]
                    u = r.get("untraced_p50_us")
                    r["corrected_vs_untraced_pct"] = 100 * (path_corr[cid] - u) / u if u else None
    for (tr, proc), rows in groups.items():
        series = {"untraced p50": [(int(r["size"]), r["untraced_p50_us"]) for r in rows],
                  "traced median": [(int(r["size"]), r["traced_rtt_median_us"]) for r in rows],
                  "traced, probe-corrected": [(int(r["size"]), r.get("corrected_rtt_median_us")) for r in rows]}
        series = {k: v for k, v in series.items() if any(y is not None for _, y in v)}
        maxz = max(int(r["size"]) for r in rows)
        marks = packet_marks(proc, maxz) if tr == "udp" else []
        shown = [m for m in marks if "fragment" in m[1]] + [m for m in marks if "IP packet" in m[1]][:3]
        fig = svg.line_plot(series, f"RTT vs size, {tr} {proc}", "request size (bytes)", "RTT (µs)",
                            marks=[(z, _short_mark(z, label), label) for z, label in sorted(shown)],
                            dashed=("traced, probe-corrected",))
        note = ("Dotted lines: request sizes where one more byte costs one more IP packet or fragment "
                "(counted on the marshalled request body, MTU 1500, 4096-byte fragments; hover a line for its "
                "bodies); "
                f"{len(marks)} boundaries up to {maxz} bytes, {len(shown)} shown. " +
                ("Only two sizes were captured: the jumps between them cannot be seen." if len(rows) < 3 else ""))
        s.items.append(Figure(f"rtt-{tr}-{proc}", f"RTT vs size ({tr} {proc})", fig, src, note))
        s.items.append(Table(f"Traced vs untraced, {tr} {proc}",
                             ["size", "rpcs", "complete", "traced_p50_us", "corrected_p50_us", "untraced_p50_us",
                              "traced_vs_untraced_%", "corrected_vs_untraced_%", "noise_%", "overlap_absorbed_us",
                              *(["probe_effect_from"] if anchors else []), "sleeps_untraced", "sleeps_traced",
                              "ipis_untraced", "ipis_traced", "same_path",
                              "untraced_modes"],
                             [{"size": r["size"], "rpcs": r.get("rpcs", ""), "complete": r.get("complete_rpcs", ""),
                               "traced_p50_us": _f(r["traced_rtt_median_us"]),
                               "corrected_p50_us": _f(r.get("corrected_rtt_median_us")),
                               "untraced_p50_us": _f(r["untraced_p50_us"]),
                               "traced_vs_untraced_%": _f(r.get("traced_vs_untraced_pct"), 1),
                               "corrected_vs_untraced_%": _f(r.get("corrected_vs_untraced_pct"), 1),
                               "noise_%": _f(noise.get(r.get("case")), 1),
                               "overlap_absorbed_us": _f(absorbed.get(r.get("case"))),
                               "probe_effect_from": anchors.get(r.get("case"), ""),
                               "sleeps_untraced": shapes.get(r.get("case"), {}).get("untraced", ""),
                               "sleeps_traced": shapes.get(r.get("case"), {}).get("traced", ""),
                               "ipis_untraced": shapes.get(r.get("case"), {}).get("untraced_ipi", ""),
                               "ipis_traced": shapes.get(r.get("case"), {}).get("traced_ipi", ""),
                               "same_path": {True: "yes", False: "NO"}.get(
                                   shapes.get(r.get("case"), {}).get("same"), ""),
                               "untraced_modes": modes.get(r.get("case"), "")} for r in rows],
                             src + "; traced_vs_untraced_pct, corrected_vs_untraced_pct; noise: manifest.json "
                                   "cases[].repeats.traced_p50_ns, half their spread as % of the untraced p50; "
                                   "overlap_absorbed: analysis/rtp.json cases[].probe_retimed.absorbed_median_ns; "
                                   "probe_effect_from: analysis/rtp.json cases[].probe_anchor; "
                                   "sleeps, ipis: manifest.json cases[].sleeps_per_call (client/server voluntary "
                                   "context switches and IPIs per call, the kept round's runs); untraced_modes: "
                                   "cases/*/client-untraced.json rtt_hist",
                             "traced vs untraced %: (traced − untraced) × 100 / untraced; corrected vs untraced %: "
                             "(corrected − untraced) × 100 / untraced: positive where the traced or probe-corrected "
                             "call is slower than the untraced build's. "
                             "noise: how far one traced run of the case moves from the next identical one; a "
                             "corrected-vs-untraced difference within about twice it is not a fault of the "
                             "correction. overlap absorbed: how much of the probe cost charged to the walked path "
                             "a branch beside it would take back with every wake-up still waiting for its waker "
                             "(0: the correction's path is the path without probes too). "
                             "probe effect from: clock build, the case's traced minus clock-build p50 plus the "
                             "clock reads' cost; other cases, their per-event costs (its clock runs took another "
                             "path). "
                             "sleeps: how often the client and the server blocked per call (client/server); "
                             "ipis: the interrupts per call their CPUs got from each other (a wake-up sent as an "
                             "interrupt, which costs a sleeping CPU microseconds, where a polling CPU's costs about "
                             "nothing); same_path NO: the untraced run blocked in other waits than the traced "
                             "one, or was woken otherwise (a fragment or reply came before, or after, its reader "
                             "waited), so its RTT is not the traced path's without probes and no step cost of "
                             "the traced run can follow it. untraced modes: where the untraced run's calls fall "
                             "(each mode's peak and share of the calls; p50: the mode that holds the p50, which the "
                             "model is held to): several modes are several paths taken in turn, one a call"))
    return s


def _histogram_cdf(h):
    """[(us, fraction of calls at or below)] at each non-empty bin's upper edge of a client histogram;
    the calls beyond its last bin keep the curve below 1 there."""
    total = sum(h["counts"]) + h.get("above", 0)
    pts, acc = [], 0
    for i, n in enumerate(h["counts"]):
        if n:
            acc += n
            pts.append((h["from_us"] + (i + 1) * h["bin_us"], acc / total))
    return pts


def latency_section(d: RunData):
    s = Section("Latency distributions", fold_items=True)
    s.items.append("How each case's calls spread: the fraction of calls at or below each round-trip time, untraced "
                   "and traced, from the client's own record of every measured call.")
    for c in d.cases:
        lat = d.latency(c)
        if not lat:
            continue
        series, srcs = {}, []
        for name, v in lat.items():
            if v["kind"] == "samples":
                xs = sorted(v["values"])
                series[name] = [(x, (i + 1) / len(xs)) for i, x in enumerate(xs)]
            elif v["kind"] == "histogram":
                series[name] = _histogram_cdf(v["values"])
            else:
                series[name] = [(v["values"][k], f) for k, f in PCTS if k in v["values"]]
            srcs.append(f"{name}: {v['source']}")
        pct_only = any(v["kind"] == "percentiles" for v in lat.values())
        s.items.append(Figure(f"cdf-{c['id']}", f"CDF {c['id']}",
                              svg.cdf_plot(series, f"RTT distribution, {c['id']}",
                                           dashed=[k for k in series if "traced (client" in k]),
                              "; ".join(srcs),
                              "Client percentiles are drawn as points (min, p50, p90, p99, max) joined by lines: "
                              "the shape between them is not measured." if pct_only else
                              "The client histograms' curves step at each bin's upper edge."))
        binned = {k: v for k, v in lat.items() if v["kind"] == "histogram"}
        if binned:
            s.items.append(Figure(f"chist-{c['id']}", f"Histogram of every call {c['id']}",
                                  svg.binned_histograms({k: v["values"] for k, v in binned.items()},
                                                        f"RTT of every measured call, {c['id']}"),
                                  "; ".join(v["source"] for v in binned.values()),
                                  "Two modes, or a tail, in the untraced run are other paths than the traced "
                                  "one (an interrupt-borne wake-up, an extra sleep): the untraced p50, which "
                                  "the model is held to, lies in whichever mode holds the middle call."))
        samples = [v for v in lat.values() if v["kind"] == "samples"]
        if samples:
            s.items.append(Figure(f"hist-{c['id']}", f"Histogram {c['id']}",
                                  svg.histogram(samples[0]["values"], f"Traced RTT per RPC, {c['id']}"),
                                  samples[0]["source"]))
    if not d.per_rpc:
        s.items.append("The distributions are the client's own (a histogram of every measured call, or from older "
                       "clients its percentiles). `rpcscope report --per-rpc` adds each RPC's traced RTT from the "
                       "analysis's per-RPC table (analysis/rpcs.jsonl.gz).")
    return s


def build(d: RunData, calls=None, call_errors=None) -> Report:
    """The report of one run. calls: {case id: export.Exported} of the example calls exported beside
    it (analysis/export.py export_examples), linked under the round-trip-path diagrams."""
    sections = [first_screen_section(d), summary_section(d), model_section(d)]
    if d.verifications:
        sections.append(verify_section.section(d.verifications))
    sections += [steps_section(d), rtp_section(d, calls, call_errors), rtt_section(d), latency_section(d)]
    if d.crosscheck:
        sections.append(crosscheck_section.section(d.crosscheck))
    head = {"run": str(d.path), "cases": len(d.cases), "analysis": d.steps_json is not None,
            "model": bool(d.models), "rtp_measured": d.rtp is not None, "missing": d.missing, "rtt": []}
    if d.crosscheck:
        head["crosscheck"] = {k: d.crosscheck[k] for k in ("bound_by_both", "agree", "agree_raw", "agree_corrected",
                                                           "corrected_by_both", "agree_placed", "placed_by_both")}
    for r in d.rtt:
        head["rtt"].append({"case": r["case"], "traced_p50_us": r["traced_rtt_median_us"],
                            "untraced_p50_us": r["untraced_p50_us"]})
    if d.models:
        head["models_percent_error"] = {t: percent_errors(m) for t, (_, m) in d.models.items()}
    if d.verifications:
        head["verified_percent_error"] = {t: {r["size"]: r.get("error_pct") for r in v.get("rows") or []}
                                          for t, v in d.verifications.items()}
    return Report(str(d.path), sections, head)


def write(rep: Report, out_dir) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("fig-*.svg"):
        f.unlink()
    for f in rep.figures():
        (out / f"fig-{f.name}.svg").write_text(f.svg + "\n")
    (out / "report.md").write_text(to_markdown(rep, Path(rep.run).name))
    (out / "index.html").write_text(to_html(rep, Path(rep.run).name))
    return {"dir": str(out), "html": str(out / "index.html"), "markdown": str(out / "report.md"),
            "figures": [str(out / f"fig-{f.name}.svg") for f in rep.figures()]}
