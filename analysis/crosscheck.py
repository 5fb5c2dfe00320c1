"""`rpcscope crosscheck RUN` or `rpcscope crosscheck KERNEL_ONLY_RUN TRACED_RUN`: the reference RPC's
kernel-only step costs (its untraced build) beside its tracepoint-based ones (its traced build,
`rpcscope analyze`), per transport and size, step by step.

RUN is a capture made with `--turns --kernel-only-runs`: its untraced build's kernel-only runs took
turns with its traced runs, and are a target run of their own in RUN/kernelonly/; each case's
kernel-only run of the round the traced analysis kept is compared, both from the same moments of the
host. Its traced build's kernel-only runs (RUN/kernelonly-traced/) saw the same kernel events with the
user tracepoints recording: each step's difference between the two builds' kernel-only medians
(`user +`, user_stretch_us) is what the user tracepoints add to that interval; its kernel-only runs with
every kernel event recorded twice (RUN/kernelonly-doubled/) give `kernel +`, where one more recording of
the kernel events lands (analysis/crossstretch.py). KERNEL_ONLY_RUN is a
run of `rpcscope run --target reference`, TRACED_RUN one of `rpcscope capture` (or several of each,
pooled).

    from rpcscope.analysis.crosscheck import crosscheck, counterparts, kept_rounds
    doc = crosscheck(["runs/both/kernelonly"], ["runs/both"], kept_rounds("runs/both"),
                     "runs/both/kernelonly-traced")
    doc = crosscheck(["runs/ko"], ["runs/traced"])   # dict: cases[].rows[] (the --json output)
    [c.step for c in counterparts()]                  # K1..K11, KO1, KO2

What a K step stands for in the traced analysis is read from the catalog (tracepoints/steps.toml): its
`dce` steps, whose per-RPC durations (analysis/rpcs.jsonl.gz) are summed call by call, or, for a dce of
[segments] labels ("network"), the traced round-trip path's segments of those labels (analysis/rtp.json).
Whether both bound the same interval is read from the catalog too: the K step's kernel_begin must be
among the first DCE step's begin events and its kernel_end among the last one's end events (a step
begins at its kernel_begin, else its first user mark; it ends at its kernel_end, else its last user
mark; a split part X' runs from X's kernel_begin to the hand-off among X's kernel_inside, X'' from there
to X's kernel_end). A step whose boundaries differ is in the table with its figures and the verdict
"other interval", saying which boundary differs; it is not held to the 10 %.

The quantities: each side's median over calls of the step's per-call time, raw, and probe-corrected
where both sides correct it: the kernel-only step less its charged events at the kernel-only run's
in-situ cost per event (analysis/kernelonly_probe.py), the traced step's corrected median
(analysis/steps.py, the traced run's in-situ costs; a counterpart of one DCE step). The two rules
differ: the traced one spreads the part of the call's probe effect its events do not take in place
over every step by its time. So, where the capture measured where a kernel event's recording lands
(--kernel-only-doubled-runs, analysis/crossstretch.py placement), both sides are also taken down by
one shared price: each step less its own charged kernel events at the measured cost in place, and less
the measured spread share of its own time (crossstretch.place; the traced side's kernel events are its
charged tracepoints less its user marks, and a step with marks gets no shared figure). The verdict is on
the shared figures where they are there, else the corrected ones where both are, else the raw ones.
Raw, the two differ by their probes as well: each side's kernel events (other event sets, other costs
per event) and the traced build's user tracepoints, in the counterpart's steps (`marks`, the
catalog's) and whatever of their cost lands beyond them, which no shared figure takes out.
Per case, the prices behind the two corrections (analysis/crossprices.py): the traced solve's per user and
per kernel event, the kernel-only runs' per kernel event, and what the traced probe effect leaves per user
event at the latter. Where both bound the same interval, each side's modes too (analysis/run.py
histogram_modes: where its calls gather, and which mode holds the median): a median of calls split
between modes falls in either, and a differing row names them.
"""
import argparse
import csv
import dataclasses
import json

from rpcscope.output import UserError, emit_json
from rpcscope.rundir import KERNELONLY_FORMAT, RunDir
from rpcscope.tracepoints import SEGMENT_UNITS, SPLIT, STEPS
from rpcscope.tracepoints.targetsteps import kernel_steps

from . import crossprices, crossstretch
from .crossstretch import fmt as _f, median as _median
from .kernelonly_out import analyze_run
from .rpctable import RpcTableError, read_rpc_table
from .run import histogram_modes, modes_label

TOLERANCE_PCT = 10.0
MODE_BIN_NS = 50        # the histogram a step's modes are found in (analysis/run.py merges to its mode bin)
AGREES, DIFFERS, OTHER, NONE = "agrees", "differs", "other interval", "no counterpart"
_STEP = {s["id"]: s for s in STEPS}


@dataclasses.dataclass(frozen=True)
class Counterpart:
    """A K step and what stands for it in the traced analysis (from the catalog)."""
    step: str
    name: str
    rows: tuple            # DCE steps (rows of the per-RPC table), or () for a segment
    segments: tuple        # labels of rtp.json path segments (the catalog's [segments] of unit "network")
    same: bool             # both bound the same interval
    why: str               # where they do not, which boundary differs


def _bounds(row):
    """(begin events, end events) of a DCE step or split part, as the catalog writes them."""
    if row in SPLIT:
        of = _STEP[SPLIT[row]["of"]]
        handoff = tuple(of["kernel_inside"])
        return (tuple(of["kernel_begin"]), handoff) if row.endswith("'") and not row.endswith("''") \
            else (handoff, tuple(of["kernel_end"]))
    s = _STEP[row]
    marks = tuple(s.get("user_events") or ())
    begin = tuple(s["kernel_begin"]) or marks[:1]
    end = tuple(s["kernel_end"]) or marks[-1:]
    return begin, end


def _short(events):
    return "|".join(events[:1]) + ("|..." if len(events) > 1 else "")


def counterparts():
    """Every target step's counterpart in the traced analysis, in catalog order."""
    out = []
    for k in kernel_steps():
        segs = tuple(lbl for lbl, unit in SEGMENT_UNITS.items() if unit in k.dce)
        if segs:
            out.append(Counterpart(k.id, k.name, (), segs, True, ""))
            continue
        rows = tuple(d for d in k.dce if d in _STEP or d in SPLIT)
        begin, _ = _bounds(rows[0])
        _, end = _bounds(rows[-1])
        why = []
        if not set(k.kernel_begin) & set(begin):
            why.append(f"{k.id} begins at {_short(k.kernel_begin)}, {rows[0]} at {_short(begin)}")
        if not set(k.kernel_end) & set(end):
            why.append(f"{k.id} ends at {_short(k.kernel_end)}, {rows[-1]} at {_short(end)}")
        out.append(Counterpart(k.id, k.name, rows, (), not why, "; ".join(why)))
    return out


def _read(path, what, again):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path} is not there: {again}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: unreadable ({e}): {again}") from None


def _kernel_only(run):
    """({(transport, proc, size): [(summary, {step: [ns per call]}), one per round]}, target.json) of a
    kernel-only run."""
    rd = RunDir(run)
    again = f"make it with `rpcscope run --target reference ... --out {rd.path}`"
    target = _read(rd.target_json, "target.json", again)
    if target.get("target") != "reference":
        raise UserError(f"{rd.path} is a kernel-only run of {target.get('target')!r}: the cross-check needs one of "
                        f"the reference RPC (rpcscope run --target reference)")
    doc = _read(rd.kernelonly_json, "kernelonly.json", again)
    if doc.get("format") != KERNELONLY_FORMAT:
        raise UserError(f"{rd.kernelonly_json}: format {doc.get('format')!r}, this rpcscope reads {KERNELONLY_FORMAT}")
    per = {}
    try:
        with open(rd.kernelonly_csv, newline="") as f:
            for r in csv.DictReader(f):
                d = per.setdefault(r["case"], {})
                for k in kernel_steps():
                    d.setdefault(k.id, []).append(int(r[k.id]))
    except FileNotFoundError:
        raise UserError(f"{rd.kernelonly_csv} is not there: {again}") from None
    out = {}
    for s in doc["cases"]:
        out.setdefault((s["transport"], target.get("proc"), int(s["size"])), []).append((s, per.get(s["case"], {})))
    return out, target


def _traced(run):
    """({(transport, proc, size): case id}, steps.json, {case: CaseTable}, rtp.json or None) of a traced run."""
    rd = RunDir(run)
    again = f"make it with `rpcscope capture --out {rd.path} ...` and `rpcscope analyze {rd.path}`"
    if not rd.manifest_path.exists():
        raise UserError(f"{rd.path} is not a traced run (no manifest.json): {again}")
    sj = _read(rd.steps_json, "steps.json", f"run `rpcscope analyze {rd.path}`")
    try:
        table = read_rpc_table(rd.path)
    except RpcTableError as e:
        raise UserError(str(e)) from None
    rtp = json.loads(rd.rtp_json.read_text()) if rd.rtp_json.exists() else None
    keys = {}
    for r in sj.get("steps", []):
        keys[(r["transport"], r["proc"], int(r["size"]))] = r["case"]
    return keys, sj, table, rtp


def _traced_sums(table, rows):
    """Per RPC, the sum of the rows' durations (ns): RPCs with a row missing are left out (their count
    returned); a row not applicable to the case counts 0."""
    out, missing = [], 0
    for i in range(len(table.call_ids)):
        total, ok = 0, True
        for r in rows:
            st = table.status[r][i]
            if st == "m" and table.dur_ns[r][i] is not None:
                total += table.dur_ns[r][i]
            elif st != "a":
                ok = False
                break
        if ok:
            out.append(total)
        else:
            missing += 1
    return out, missing


def _marks(rows):
    """The traced build's user tracepoints in the rows (each occurrence), as the catalog names them."""
    return sum(len(_STEP[r].get("user_events") or ()) for r in rows if r in _STEP)


def _segments(rtp, case, labels):
    """{label: (median ns on the path, share of the calls that have it)} of the case's path segments of
    these labels in rtp.json; None where the case is not there."""
    for c in (rtp or {}).get("cases", []):
        if c.get("case") == case:
            return {p["segment"]: (p["median_ns"], p.get("on_path_frac", 1.0)) for p in c.get("path", [])
                    if p.get("segment") in labels}
    return None


def _pooled_segments(per_run):
    """{label: (median of the runs' medians, median of their shares)} over the runs that have the case."""
    runs = [x for x in per_run if x is not None]
    if not runs:
        return None
    labels = {lbl for x in runs for lbl in x}
    return {lbl: (_median([x[lbl][0] for x in runs if lbl in x]), _median([x[lbl][1] if lbl in x else 0.0
                                                                             for x in runs]))
            for lbl in labels}


def _corrected(cp, summaries, parts):
    """(kernel-only, traced) corrected p50 (us) of a step, each the median of its runs' figures; None on
    a side that does not correct it (the traced side: a counterpart of one DCE step)."""
    ko = _median([x["corrected_p50_us"] for s in summaries for x in s["steps"]
                  if x["id"] == cp.step and x.get("corrected_p50_us") is not None])
    tr = _median([r["corrected_median_us"] for *_, steps in parts for r in steps
                  if len(cp.rows) == 1 and r.get("step") == cp.rows[0] and r.get("corrected_median_us") is not None])
    return ko, tr


def _pct(a, b):
    return round(100 * (a - b) / b, 1) if a is not None and b else None


def _row(cp, ko_vals, parts, multi, summaries=()):
    """The row of one K step: ko_vals the kernel-only runs' per-call ns, parts [(CaseTable, rtp.json, case,
    the case's steps.json rows)] of the traced runs (their calls pooled; a path segment's figure the median
    of the runs' medians), summaries the kernel-only runs' kernelonly.json cases."""
    ko = _median(ko_vals)
    ko_c, tr_c = _corrected(cp, summaries, parts)
    row = {"step": cp.step, "name": cp.name, "traced": "+".join(cp.rows) or " + ".join(cp.segments),
           "kernel_only_p50_us": None if ko is None else round(ko / 1e3, 3), "kernel_only_calls": len(ko_vals),
           "traced_p50_us": None, "traced_calls": 0, "traced_left_out": 0, "marks": None, "diff_%": None,
           "kernel_only_corrected_p50_us": ko_c, "traced_corrected_p50_us": tr_c,
           "corrected_diff_%": _pct(ko_c, tr_c), "verdict_on": "raw", "verdict": None, "why": cp.why}
    if cp.segments:
        segs = _pooled_segments([_segments(rtp, case, cp.segments) for _, rtp, case, _ in parts])
        held = {lbl: v for lbl, v in (segs or {}).items() if v[1] >= 0.5}       # on the path of most calls
        if not held:
            seen = ", ".join(f"{lbl} in {100 * f:.0f} %" for lbl, (_, f) in (segs or {}).items())
            no_rtp = any(rtp is None for _, rtp, _, _ in parts)
            row.update(verdict=NONE, why=("a traced run has no rtp.json: run `rpcscope rtp` on it" if no_rtp
                                          else f"the traced round-trip path has no {' or '.join(cp.segments)} "
                                               f"segment in most calls ({seen or 'in none'}; on veth the receiver's "
                                               f"protocol input runs inside the sender's sendmsg'', rtp.json notes): "
                                               f"the traced analysis does not bound this step"))
            return row
        tr, n = sum(m for m, _ in held.values()), None
        row["traced"] = f"rtp.json {' + '.join(held)}"
        other = [lbl for lbl in held if SEGMENT_UNITS.get(lbl) and lbl != cp.segments[0]]
        if other:
            row["why"] = (f"the traced path's {', '.join(other)} is the idle task's time until a timer sends a "
                          f"queued packet on (analysis/rtp.py), not a hand-off to its receive")
    else:
        sums, left = [], 0
        for table, *_ in parts:
            x, m = _traced_sums(table, cp.rows)
            sums += x
            left += m
        tr, n = _median(sums), len(sums)
        row.update(traced_calls=n, traced_left_out=left, marks=_marks(cp.rows))
    if tr is None or ko is None:
        row.update(verdict=NONE, why="no measured call on one side")
        return row
    row["traced_p50_us"] = round(tr / 1e3, 3)
    row["diff_%"] = round(100 * (ko - tr) / tr, 1) if tr else 0.0 if not ko else None
    if multi:
        row.update(verdict=OTHER, why=f"the kernel-only path is one exchange of {multi:.2f} a call; the traced "
                                      f"steps sum the call's fragments")
    elif not cp.same or row["why"]:
        row["verdict"] = OTHER
    else:
        if not cp.segments:
            row["kernel_only_modes"], row["traced_modes"] = _modes(ko_vals, ko), _modes(sums, tr)
            row["traced_kernel_events_per_call"] = _traced_kernel_events(cp, parts)
        judge(row)
    return row


def _traced_kernel_events(cp, parts):
    """The kernel events the traced analysis charges a counterpart of one DCE step, a call (the median of
    its runs' tracepoints_median, less the step's user marks), None for a sum of steps."""
    if len(cp.rows) != 1:
        return None
    got = _median([r["tracepoints_median"] for *_, steps in parts for r in steps
                   if r.get("step") == cp.rows[0] and r.get("tracepoints_median") is not None])
    return None if got is None else max(0.0, got - _marks(cp.rows))


def judge(row):
    """The verdict of a row both bound the same way, on the figures that take out the most of the two
    probes alike: at the shared price where the capture measured it (placed, analysis/crossstretch.py
    place), else each side's own correction where both correct the step, else the raw ones; the reason a
    differing row differs."""
    on = ("placed" if row.get("placed_diff_%") is not None else
          "corrected" if row["corrected_diff_%"] is not None else "raw")
    diff = row[{"placed": "placed_diff_%", "corrected": "corrected_diff_%", "raw": "diff_%"}[on]]
    row.update(verdict_on=on, verdict=AGREES if diff is not None and abs(diff) <= TOLERANCE_PCT else DIFFERS,
               why="")
    if row["verdict"] == AGREES:
        return
    if on == "placed":
        row["why"] = (f"raw {row['diff_%']:+.1f} %; both sides less their charged kernel events at the shared price "
                      f"take off {row['kernel_only_p50_us'] - row['kernel_only_placed_p50_us']:.2f} us kernel-only "
                      f"and {row['traced_p50_us'] - row['traced_placed_p50_us']:.2f} us traced")
    elif on == "corrected":
        row["why"] = (f"raw {row['diff_%']:+.1f} %; the corrections take off "
                      f"{row['kernel_only_p50_us'] - row['kernel_only_corrected_p50_us']:.2f} us kernel-only (its "
                      f"events in the step at its in-situ cost) and "
                      f"{row['traced_p50_us'] - row['traced_corrected_p50_us']:.2f} us traced (its events in place "
                      f"and the step's share of the rest of the call's probe cost, analysis/steps.py)")
    several = [f"{side} {modes_label(m)}" for side, m in (("kernel-only", row.get("kernel_only_modes")),
                                                          ("traced", row.get("traced_modes")))
               if m and len(m["modes"]) > 1]
    if several:
        row["why"] = (row["why"] + "; " if row["why"] else "") + \
            f"the calls fall in several modes ({'; '.join(several)}), and a median in either"


def _modes(vals_ns, p50_ns):
    """histogram_modes (analysis/run.py) of a step's per-call times: where its calls gather, with the share
    of each, and which holds the median."""
    if not vals_ns:
        return None
    lo, bin_ns = int(min(vals_ns)) // MODE_BIN_NS * MODE_BIN_NS, MODE_BIN_NS
    hi = int(sorted(vals_ns)[int(0.999 * (len(vals_ns) - 1))])
    counts = [0] * ((hi - lo) // bin_ns + 1)
    above = 0
    for v in vals_ns:
        k = (int(v) - lo) // bin_ns
        if k < len(counts):
            counts[k] += 1
        else:
            above += 1
    return histogram_modes({"bin_ns": bin_ns, "from_ns": lo, "counts": counts, "above": above}, p50_ns)


def _pool_kernel_only(loaded, rounds=None):
    """{key: (summaries, {step: pooled ns per call})}, the first run's target.json, over kernel-only runs as
    _kernel_only read them; rounds: {key: the one round to take}, else every round."""
    pooled, first = {}, None
    for ko, target in loaded:
        first = first or target
        for key, per_round in ko.items():
            taken = [x for x in per_round if rounds is None or int(x[0].get("round", 1)) == rounds.get(key)]
            if not taken:
                continue
            sums, steps = pooled.setdefault(key, ([], {}))
            for summary, per in taken:
                sums.append(summary)
                for step, vals in per.items():
                    steps.setdefault(step, []).extend(vals)
    return pooled, first


def _pool_traced(runs):
    """{key: [(CaseTable, rtp.json, case, steps.json rtt row, steps.json step rows)]} over traced runs."""
    pooled = {}
    for run in runs:
        keys, sj, table, rtp = _traced(run)
        for key, case in keys.items():
            if case in table:
                rtt = next((r for r in sj.get("rtt", []) if r.get("case") == case), {})
                steps = [r for r in sj.get("steps", []) if r.get("case") == case]
                pooled.setdefault(key, []).append((table[case], rtp, case, rtt, steps))
    return pooled


def _mid(rows, field):
    vals = [r.get(field) for r in rows if r.get(field) is not None]
    return _median(vals)


def _not_analyzed(ko_runs, key, rnd=None):
    """Why the kernel-only analysis left out the case of key (its kernelonly.json not_analyzed), or ""."""
    t, proc, size = key
    want = f"{t}-{proc}-{size}"
    for run in ko_runs:
        try:
            doc = json.loads(RunDir(run).kernelonly_json.read_text())
        except (OSError, ValueError):
            continue
        for x in doc.get("not_analyzed") or []:
            case = str(x.get("case", ""))
            if case == want or (case.startswith(want + "-r") and (rnd is None or case == f"{want}-r{rnd}")):
                return f"{case} not analyzed: {x.get('why')}"
    return ""


def kept_rounds(run):
    """{(transport, proc, size): the round (1, 2, ...) the traced analysis took its case from} of a capture
    whose runs took turns: the round its kernel-only runs are compared in (the same moments of the host)."""
    m = _read(RunDir(run).manifest_path, "manifest.json", "capture it again")
    kept = {}
    for c in m.get("cases", []):
        k = ((m.get("sweeps") or {}).get(c["transport"]) or {}).get("kept_by_case", {}).get(c["id"])
        if k is not None:
            kept[(c["transport"], c["proc"], int(c["size"]))] = int(k) + 1
    return kept


def crosscheck(ko_runs, traced_runs, rounds=None, traced_build_run=None, doubled_run=None):
    """The cross-check of runs of the reference RPC (a dict, the --json output). Each side is a list of
    runs of the same cases (made taking turns with the other side's, so that a change of the host's
    speed touches both alike): each side's calls pooled over its runs. rounds: the one round of each
    case the kernel-only side takes (kept_rounds, where both sides are one capture's), else all.
    With rounds, the capture's other kernel-only runs (analysis/crossstretch.py): traced_build_run, the
    traced build's (kernelonly-traced/: user +, what its user tracepoints add to each step); doubled_run,
    the untraced build's with every kernel event recorded twice (kernelonly-doubled/: kernel +)."""
    loaded = [_kernel_only(run) for run in ko_runs]
    ko, target = _pool_kernel_only(loaded, rounds)
    every = loaded[0][0] if rounds is not None else {}      # one capture's: each round apart
    others = {kind: _kernel_only(run)[0] for kind, run in (("user", traced_build_run), ("kernel", doubled_run))
              if run and rounds is not None}
    tr = _pool_traced(traced_runs)
    probes = crossprices.traced_probes(traced_runs)
    cps = counterparts()
    cases, unpaired = [], []
    for key in sorted(set(ko) | set(tr), key=lambda k: (k[0], k[2])):
        t, proc, size = key
        if key not in ko or key not in tr:
            side = "the traced run" if key in ko else "the kernel-only run"
            why = "" if key in ko else _not_analyzed(ko_runs, key, (rounds or {}).get(key))
            unpaired.append(f"{t} {proc} {size}: not in {side}" + (f" ({why})" if why else ""))
            continue
        summaries, per = ko[key]
        parts = [(table, rtp, case, steps) for table, rtp, case, _, steps in tr[key]]
        per_call = _median([s["exchanges_per_call"] for s in summaries])
        multi = per_call if per_call > 1.05 else 0
        rows = [_row(cp, per.get(cp.step, []), parts, multi, summaries) for cp in cps]
        if every:
            # How far each kernel-only step's median moves between the capture's rounds: what runs apart
            # would differ by, which the turns take out.
            by_round = sorted(every.get(key, []), key=lambda x: int(x[0].get("round", 1)))
            for r in rows:
                r["kernel_only_rounds_p50_us"] = [None if not p.get(r["step"]) else
                                                  round(_median(p[r["step"]]) / 1e3, 3) for _, p in by_round]
        kept_other = {}
        for kind, runs in others.items():
            kept_other[kind] = next((x for x in runs.get(key, []) if int(x[0].get("round", 1)) == rounds.get(key)),
                                    None)
            events = {x["id"]: x.get("events_mean") for x in summaries[0]["steps"]} if kind == "kernel" else None
            crossstretch.add_rows(rows, kind, kept_other[kind][1] if kept_other[kind] else {}, runs.get(key, []),
                                  every.get(key, []), events)
        rtts = [rtt for _, _, _, rtt, _ in tr[key]]
        cases.append({"transport": t, "proc": proc, "size": size, "kernel_only_case": summaries[0]["case"],
                      "traced_case": parts[0][2], "runs": {"kernel_only": len(summaries), "traced": len(parts)},
                      "rounds": len(every.get(key, [])) or None,
                      "exchanges_per_call": per_call,
                      "kernel_only_program_p50_us": _mid(summaries, "program_p50_us"),
                      "kernel_only_rtt_p50_us": _mid(summaries, "rtt_p50_us"),
                      "traced_untraced_p50_us": _mid(rtts, "untraced_p50_us"),
                      "traced_rtt_p50_us": _mid(rtts, "traced_rtt_median_us"),
                      "prices": crossprices.case_prices(probes, parts[0][2], t, summaries), "rows": rows})
        for kind, got in kept_other.items():
            crossstretch.case_figures(cases[-1], rows, kind, got[0] if got else None)
    fits = {kind: crossstretch.placement(cases, kind) for kind in others}
    price = crossstretch.shared_price(fits.get("kernel"))
    both = [r for c in cases for r in c["rows"] if r["verdict"] in (AGREES, DIFFERS)]
    for r in both:
        crossstretch.place(r, price)
        judge(r)
    if "user" in others:
        for c in cases:
            crossstretch.add_user_measured(c["rows"], DIFFERS, AGREES)

    def within(key):
        return sum(1 for r in both if r[key] is not None and abs(r[key]) <= TOLERANCE_PCT)

    return {"format": "rpcscope-crosscheck/1", "kernel_only_run": ",".join(map(str, ko_runs)),
            "kernel_only_rounds": ("the traced analysis's kept round of each case" if rounds is not None
                                   else "every round"),
            "traced_run": ",".join(map(str, traced_runs)), "kernel_only_runs": [str(r) for r in ko_runs],
            "traced_runs": [str(r) for r in traced_runs],
            "quantity": "median over calls of the step's per-call time, raw, probe-corrected by each side's own "
                        "rule, and both less their charged kernel events at one shared price (the verdict on the "
                        "shared price's figures where the capture measured it, else on the corrected figures "
                        "where both sides correct the step, else on the raw ones)",
            "tolerance_%": TOLERANCE_PCT, "cases": cases, "unpaired": unpaired,
            "bound_by_both": len(both), "agree": sum(1 for r in both if r["verdict"] == AGREES),
            "agree_raw": within("diff_%"), "agree_corrected": within("corrected_diff_%"),
            "corrected_by_both": sum(1 for r in both if r["corrected_diff_%"] is not None),
            "agree_placed": within("placed_diff_%"),
            "placed_by_both": sum(1 for r in both if r["placed_diff_%"] is not None),
            "shared_price": price, "kernel_only_calls": target.get("calls"), "placement": fits}


def render(doc):
    """The human table."""
    lines = [f"rpcscope crosscheck: kernel-only {doc['kernel_only_run']} beside tracepoint-based "
             f"{doc['traced_run']}",
             f"  {doc['quantity']}; verdict against {doc['tolerance_%']:g} % where both bound the same interval",
             f"  {doc['agree']} of {doc['bound_by_both']} steps both bound agree (raw figures: {doc['agree_raw']} "
             f"within {doc['tolerance_%']:g} %; corrected: {doc['agree_corrected']} of the "
             f"{doc['corrected_by_both']} both correct; at the shared price: {doc['agree_placed']} of the "
             f"{doc['placed_by_both']} it applies to)"]
    lines += ["  " + ln for ln in crossstretch.render_placement(doc.get("placement") or {})]
    lines.append("  " + crossstretch.render_price(doc["shared_price"]))
    placed = doc["placed_by_both"] > 0
    for c in doc["cases"]:
        stretch = [k for k in crossstretch.KINDS if f"{k}_stretch_path_us" in c]
        lines += ["", f"{c['transport'].upper()} {c['proc']} {c['size']} B (kernel-only {c['kernel_only_case']}, "
                      f"traced {c['traced_case']}): program p50 {_f(c['kernel_only_program_p50_us'], 1)} us "
                      f"untraced build under kernel tracing, {_f(c['traced_untraced_p50_us'], 1)} us untraced "
                      f"build alone; traced RTT p50 {_f(c['traced_rtt_p50_us'], 1)} us",
                  f"  {'step':<4} {'traced counterpart':<22} {'kernel us':>9} {'traced us':>9} {'calls':>5} "
                  f"{'diff':>7} {'marks':>5} {'kernel corr':>11} {'traced corr':>11} {'diff':>7}"
                  + (f" {'shared: kernel':>14} {'traced':>6} {'diff':>7}" if placed else "")
                  + "".join(f" {k + ' +':>8}" for k in stretch)
                  + (f" {'events':>6} {'ns/ev':>5}" if "kernel" in stretch else "") + "  verdict"]
        moves = [f"{r['step']} {min(v):.2f}-{max(v):.2f}" for r in c["rows"] if r["verdict"] in (AGREES, DIFFERS)
                 for v in [[x for x in r.get("kernel_only_rounds_p50_us") or [] if x is not None]] if len(v) > 1]
        if moves:
            lines.insert(-1, f"  the kernel-only medians over the capture's {c['rounds']} rounds, us (how far runs "
                             f"apart would differ; the turns take it out): {', '.join(moves)}")
        if c.get("prices"):
            lines.insert(-1, crossprices.render(c["prices"]))
        for line in crossstretch.render_case(c):
            lines.insert(-1, line)
        for r in c["rows"]:
            diff, cdiff = _pctf(r["diff_%"]), _pctf(r["corrected_diff_%"])
            lines.append(f"  {r['step']:<4} {r['traced'][:22]:<22} {_f(r['kernel_only_p50_us']):>9} "
                         f"{_f(r['traced_p50_us']):>9} {_f(r['traced_calls'] or None):>5} {diff:>7} "
                         f"{_f(r['marks'], 0):>5} {_f(r['kernel_only_corrected_p50_us']):>11} "
                         f"{_f(r['traced_corrected_p50_us']):>11} {cdiff:>7}"
                         + (f" {_f(r.get('kernel_only_placed_p50_us')):>14} {_f(r.get('traced_placed_p50_us')):>6} "
                            f"{_pctf(r.get('placed_diff_%')):>7}" if placed else "")
                         + "".join(f" {_f(r.get(k + '_stretch_us')):>8}" for k in stretch)
                         + (f" {_f(r.get('events_per_call')):>6} {_f(r.get('kernel_stretch_per_event_ns'), 0):>5}"
                            if "kernel" in stretch else "") + f"  {r['verdict']}"
                         + (f" ({r['verdict_on']})" if r["verdict"] in (AGREES, DIFFERS) else "")
                         + (f": {r['why']}" if r["verdict"] in (OTHER, NONE, DIFFERS) and r["why"] else ""))
    lines += [f"not compared: {u}" for u in doc["unpaired"]]
    return "\n".join(lines)


EPILOG = """examples (the reference RPC: its untraced build recorded from kernel events alone, its traced build
from its tracepoints and kernel events, the same sizes and transports):
  rpcscope capture --transport udp,tcp --sizes 0,1392 --calls 1000 --turns --kernel-only-runs --out runs/both \\
      && rpcscope analyze runs/both && rpcscope rtp runs/both
  rpcscope crosscheck runs/both      both builds from one capture, their runs taking turns of a few calls
                                     (the host's moments shared): the traced analysis's kept round beside
                                     the kernel-only runs of that round (analysed on first use); with
                                     capture --kernel-only-traced-runs, what the user tracepoints add to
                                     each step (user +: the traced build's kernel-only run less the
                                     untraced build's); with --kernel-only-doubled-runs, where one more
                                     recording of the kernel events lands (kernel +: the untraced build's
                                     kernel-only run with every kernel event recorded twice less the
                                     one recorded once, and per event the step is charged)
  rpcscope run --target reference --transport udp,tcp --sizes 0,1392,4016 --calls 2000 --out runs/ko
  rpcscope capture --transport udp,tcp --sizes 0,1392,4016 --calls 2000 --out runs/traced \\
      && rpcscope analyze runs/traced && rpcscope rtp runs/traced
  rpcscope crosscheck runs/ko runs/traced                the table, per transport, size and K step
  rpcscope crosscheck runs/ko runs/traced --json         the same as JSON
  rpcscope crosscheck runs/ko1,runs/ko2 runs/tr1,runs/tr2
                         runs of each side made taking turns (ko1, tr1, ko2, tr2), each side's calls pooled

Each K step is compared with its catalog counterpart (tracepoints/steps.toml [[target_steps]] dce): the
per-call sum of its DCE steps (analysis/rpcs.jsonl.gz) or the traced path's network segment
(analysis/rtp.json). Verdict: agrees / differs (against 10 %) where both bound the same interval; other
interval (which boundary differs) or no counterpart otherwise. It is on the shared price's figures where the
capture has --kernel-only-doubled-runs (shared: each side less its charged kernel events at the price the
doubled runs measured, in place and as a share of its time: both record kernel events with tracefs, so one
event costs both alike), else on each side's own correction where both correct the step (kernel corr: less
its recorded events at the kernel-only run's in-situ cost; traced corr: steps.json's corrected median), else
on the raw ones. calls: the traced calls with every DCE step
of the counterpart measured (the median's sample). marks: the traced build's user tracepoints
in the counterpart's DCE steps (the catalog's marks, each occurrence), its own probe on that step.
probe prices (per case): the traced run's in-situ solve per user and per kernel event, the kernel-only runs'
per kernel event, and the traced probe effect less its kernel events at that price, per user event.
"""


def _pctf(v):
    return "-" if v is None else f"{v:+.1f}%"


def _runs(arg):
    return [r for r in arg.split(",") if r] or [arg]


def _embedded(run):
    """(the kernel-only run, kept_rounds, the traced build's kernel-only run or None, the doubled kernel-only
    run or None) of a capture made with --turns --kernel-only-runs; each kernel-only run analyzed first where
    it has not been."""
    rd = RunDir(run)
    ko = RunDir(rd.kernel_only_run)
    if not rd.manifest_path.exists() or not ko.target_json.exists():
        raise UserError(f"{run} holds no kernel-only runs ({ko.target_json} is not there): give a capture made "
                        f"with `rpcscope capture --turns --kernel-only-runs`, or two runs: KERNEL_ONLY_RUN TRACED_RUN")
    got = []
    for x in (RunDir(d) for d in rd.kernel_only_runs()):
        if x.target_json.exists() and not x.kernelonly_json.exists():
            analyze_run(x.path, quiet=True)
        got.append(x.path if x.target_json.exists() else None)
    return got[0], kept_rounds(run), got[1], got[2]


def cmd_crosscheck(args):
    if args.traced is None:
        ko_run, rounds, tb_run, dbl_run = _embedded(args.kernel_only)
        doc = crosscheck([ko_run], [args.kernel_only], rounds, tb_run, dbl_run)
    else:
        doc = crosscheck(_runs(args.kernel_only), _runs(args.traced))
    if not doc["cases"]:
        raise UserError(f"no transport and size in both runs ({'; '.join(doc['unpaired'])}): run them with the "
                        f"same --transport, --proc and --sizes")
    if args.json:
        emit_json(doc)
    else:
        print(render(doc))
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "crosscheck", help="the reference RPC's kernel-only step costs beside its tracepoint-based ones",
        description="Compare the reference RPC's kernel-only step costs (its untraced build) with its "
                    "tracepoint-based ones (its traced build): those of one capture whose builds took turns "
                    "(rpcscope capture --turns --kernel-only-runs + analyze + rtp), or a kernel-only run (rpcscope "
                    "run --target reference) and a traced run of the same sizes and transports (rpcscope capture + "
                    "analyze + rtp): per size and K step, both medians, the % difference and a verdict against 10 %.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel_only", metavar="RUN | KERNEL_ONLY_RUN",
                    help="a capture made with --turns --kernel-only-runs, analysed (both sides are its own: "
                         "RUN/kernelonly/, in the traced analysis's kept round); or a run of rpcscope run --target "
                         "reference, or several separated by commas (pooled)")
    ap.add_argument("traced", metavar="TRACED_RUN", nargs="?",
                    help="with a kernel-only run: a run of rpcscope capture, analysed, or several separated by "
                         "commas (pooled)")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    ap.set_defaults(func=cmd_crosscheck)
    return ap
