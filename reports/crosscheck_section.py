"""The report's cross-check section, for a capture whose untraced build's kernel-only runs took turns
with its traced runs (`capture --turns --kernel-only-runs`): the table `rpcscope crosscheck RUN` prints,
each K step of each case beside its counterpart in the traced analysis (analysis/crosscheck.py)."""
from __future__ import annotations

from rpcscope.analysis.crosscheck import AGREES, DIFFERS, crosscheck, kept_rounds
from rpcscope.analysis.crossstretch import render_placement, render_price
from rpcscope.output import UserError
from rpcscope.rundir import RunDir

from .objects import Section, Table

COLUMNS = ["case", "step", "traced counterpart", "kernel-only p50 µs", "traced p50 µs", "diff %",
           "kernel-only p50 over the rounds µs",
           "kernel-only corrected µs", "traced corrected µs", "corrected diff %",
           "kernel-only at the shared price µs", "traced at the shared price µs", "shared price diff %",
           "user tracepoints add µs", "kernel events twice add µs", "verdict", "why"]
LANDS_COLUMNS = ["case", "over K1..K11 µs", "on the program's p50 µs", "events charged a call", "per event ns",
                 "per event, by interval ns", "in the intervals charged none µs"]
PRICE_COLUMNS = ["case", "traced solve: user event ns", "traced solve: kernel event ns", "how it solved",
                 "kernel-only: kernel event ns", "traced probe effect µs", "user events on the path",
                 "kernel events on the path", "left a user event ns"]


def load(path):
    """(the cross-check of a capture's kernel-only runs, or None; what is missing for it, or "")."""
    rd = RunDir(path)
    ko, tb, dbl = (RunDir(d) for d in rd.kernel_only_runs())
    if not ko.target_json.exists():
        return None, ""
    if not rd.rtp_json.exists() or any(x.target_json.exists() and not x.kernelonly_json.exists()
                                       for x in (ko, tb, dbl)):
        return None, (f"the cross-check of the kernel-only runs in {ko.path}: run `rpcscope analyze {path}` and "
                      f"`rpcscope rtp {path}`")
    try:
        return crosscheck([ko.path], [path], kept_rounds(path), *(x.path if x.target_json.exists() else None
                                                                  for x in (tb, dbl))), ""
    except UserError as e:
        return None, f"the cross-check of the kernel-only runs: {e}"


def _pct(v):
    return "-" if v is None else f"{v:+.1f}"


def _us(v):
    return "-" if v is None else f"{v:.2f}"


def _ns(v):
    return "-" if v is None else f"{v:.0f}"


def _range(vals):
    vals = [v for v in vals or [] if v is not None]
    return f"{min(vals):.2f}-{max(vals):.2f}" if len(vals) > 1 else "-"


def section(doc):
    """The section of a cross-check (analysis/crosscheck.py crosscheck's dict)."""
    s = Section("Kernel-only beside tracepoint-based steps (cross-check)")
    s.items.append(
        f"The untraced build's runs, recorded from kernel events alone, took turns with the traced build's in this "
        f"capture; each case's kernel-only run of the round the traced analysis kept is set beside it, step by "
        f"step. {doc['quantity'][:1].upper()}{doc['quantity'][1:]}. Of the {doc['bound_by_both']} steps both "
        f"bound the same way, "
        f"{doc['agree']} agree within {doc['tolerance_%']:g} %; on the raw figures {doc['agree_raw']} do, on the "
        f"corrected ones {doc['agree_corrected']} of the {doc['corrected_by_both']} both correct, at the shared "
        f"price {doc['agree_placed']} of the {doc['placed_by_both']} it applies to "
        f"({render_price(doc['shared_price'])}). The other rows "
        f"bound another interval or have no counterpart, which their why column names. Beside each, the kernel-only "
        f"step's median in every round of the capture: how far runs apart would differ, which the turns take out; "
        f"and, where the capture recorded the traced build from kernel events alone too, how much longer the step "
        f"is in that build, whose kernel events are the same: what its user tracepoints add to the step; and, "
        f"where it recorded the untraced build with every kernel event recorded twice, how much longer the step "
        f"is then: where one more recording of the kernel events lands.")
    rows = []
    for c in doc["cases"]:
        for r in c["rows"]:
            rows.append({"case": f"{c['transport'].upper()} {c['size']} B", "step": r["step"],
                         "traced counterpart": r["traced"], "kernel-only p50 µs": _us(r["kernel_only_p50_us"]),
                         "traced p50 µs": _us(r["traced_p50_us"]), "diff %": _pct(r["diff_%"]),
                         "kernel-only p50 over the rounds µs": _range(r.get("kernel_only_rounds_p50_us")),
                         "kernel-only corrected µs": _us(r["kernel_only_corrected_p50_us"]),
                         "traced corrected µs": _us(r["traced_corrected_p50_us"]),
                         "corrected diff %": _pct(r["corrected_diff_%"]),
                         "kernel-only at the shared price µs": _us(r.get("kernel_only_placed_p50_us")),
                         "traced at the shared price µs": _us(r.get("traced_placed_p50_us")),
                         "shared price diff %": _pct(r.get("placed_diff_%")),
                         "user tracepoints add µs": _us(r.get("user_stretch_us")),
                         "kernel events twice add µs": _us(r.get("kernel_stretch_us")),
                         "verdict": r["verdict"] + (f" ({r['verdict_on']})" if r["verdict"] in (AGREES, DIFFERS)
                                                    else ""),
                         "why": r["why"] or ""})
    s.items.append(Table("Cross-check: kernel-only and tracepoint-based step medians", COLUMNS, rows,
                         f"rpcscope crosscheck {doc['traced_run']} (kernel-only: {doc['kernel_only_run']}, "
                         f"analysis/kernelonly.json and kernelonly-calls.csv; traced: analysis/rpcs.jsonl.gz, "
                         f"steps.json, rtp.json)"))
    prices = [{"case": f"{c['transport'].upper()} {c['size']} B",
               "traced solve: user event ns": _ns(p["traced_user_event_ns"]),
               "traced solve: kernel event ns": _ns(p["traced_kernel_event_ns"]), "how it solved": p["traced_method"],
               "kernel-only: kernel event ns": _ns(p["kernel_only_event_ns"]),
               "traced probe effect µs": _us(p["traced_probe_effect_us"]),
               "user events on the path": f"{p['path_user_events']:g}",
               "kernel events on the path": f"{p['path_kernel_events']:g}",
               "left a user event ns": _ns(p["user_event_left_ns"])}
              for c in doc["cases"] for p in [c.get("prices")] if p]
    if prices:
        s.items.append(
            "The prices behind the two corrections: what the traced run's in-situ solve charges a user and a kernel "
            "event, and what the kernel-only runs measured for a kernel event. Its probe effect less its kernel "
            "events on the path at the kernel-only price, per user event on the path, is the user event's price "
            "those two imply (analysis/crossprices.py).")
        s.items.append(Table("Cross-check: the probe prices behind the corrections", PRICE_COLUMNS, prices,
                             f"rpcscope crosscheck {doc['traced_run']} --json: cases[].prices (traced: "
                             f"analysis/probe.json; kernel-only: analysis/kernelonly.json cases[].probe)"))
    lands = [{"case": f"{c['transport'].upper()} {c['size']} B",
              "over K1..K11 µs": _us(c["kernel_stretch_path_us"]),
              "on the program's p50 µs": _us(c.get("kernel_stretch_program_us")),
              "events charged a call": _us(c.get("kernel_stretch_events_per_call")),
              "per event ns": _ns(c.get("kernel_stretch_per_event_ns")),
              "per event, by interval ns": "-" if not c.get("kernel_stretch_per_event_range_ns") else
              "{:.0f} to {:.0f}".format(*c["kernel_stretch_per_event_range_ns"]),
              "in the intervals charged none µs": _us(c.get("kernel_stretch_eventless_us"))}
             for c in doc["cases"] if c.get("kernel_stretch_path_us") is not None]
    if lands:
        s.items.append(
            "Where one more recording of the kernel events lands: the kernel-only run with every kernel event "
            "recorded twice less the kernel-only run, over the intervals K1..K11, per case, and per event the "
            "kernel-only analysis charges them (analysis/crossstretch.py). "
            + " ".join(ln[:1].upper() + ln[1:] + "." for ln in render_placement(doc.get("placement") or {})))
        s.items.append(Table("Cross-check: where a kernel event's recording lands", LANDS_COLUMNS, lands,
                             f"rpcscope crosscheck {doc['traced_run']} --json: cases[].kernel_stretch_*"))
    return s
