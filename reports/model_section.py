"""The report's model section: unit costs, calculated vs measured per size, baselines, the paper beside.

It reads the model files only (RUN/analysis/model-TRANSPORT.json, written by `rpcscope model`):
their rows are computed once there, and printed here as they are.
"""
from __future__ import annotations

import csv
from pathlib import Path

DCE_SUMMARY = Path(__file__).resolve().parent.parent / "analysis" / "data" / "dce_table2_summary.csv"
ERROR_SIGN = ("% error = (Measured − Calculated) × 100 / Measured, the DCE study's sign: positive where the "
              "model is short")
INTRO = ("The model explains the round trip with a few unit costs shared by every step of their kind (per call, "
         "send, packet, receive, wake-up, window acknowledgement, and per byte marshalled, copied into and out of the "
         "kernel), fitted to the measured round-trip "
         "path of the fitted sizes; the counts come from the protocol's arithmetic and the wire from physics. A "
         "predicted size takes nothing measured at that size; Measured (the untraced p50) only judges it. Beside "
         "the model stand two baselines a skeptic would use: linear interpolation of the fitted sizes' Measured, "
         "and a line A + B × bytes + C × packets through them. " + ERROR_SIGN + ".")


def _f(v, nd=2):
    return "" if v is None else f"{v:.{nd}f}"


def param_rows(m):
    return [{"unit cost": p["name"],
             "value": ((f"{p['value'] * 1000:.3f}" if p["unit"] == "us/byte" else f"{p['value']:.3f}")
                       if p["fitted"] else "not fitted"),
             "unit": "ns/byte" if p["unit"] == "us/byte" else p["unit"],
             "one count is": p["what"] if p["fitted"] else p["why_not"]} for p in m["params"]]


def size_rows(m):
    out = []
    for r in m["rows"]:
        err = r["error_pct"]
        out.append({"size": r["size"], "kind": r["kind"], "measured_us": _f(r["measured_us"]),
                    "spread_%": _f(r["measured_spread_pct"], 1), "model_us": _f(r["calculated_us"]),
                    "model_%": _f(err), "cv_%": _f(r["cv_error_pct"]), "interp_%": _f(r["interp_error_pct"]),
                    "line_%": _f(r["line_error_pct"]), "goal": f"{r['goal_pct']:g} %",
                    "met": "" if err is None else ("yes" if abs(err) <= r["goal_pct"] else "NO")})
    return out


def summary_sentence(m):
    s = m["summary"]
    mae, cv = s["mean_abs_error_pct"], s["cv_mean_abs_error_pct"]
    parts = [f"{s['fitted_within_goal']} of {s['fitted_sizes']} fitted sizes within 2 %"]
    if s["predicted_sizes"]:
        parts.append(f"{s['predicted_within_goal']} of {s['predicted_sizes']} predicted sizes within 5 %; mean "
                     f"|% error| over them: model {_f(mae['model'])}, interpolation {_f(mae['interpolation'])}, "
                     f"line {_f(mae['line'])}")
    parts.append(f"each fitted size left out of its own fit: model {_f(cv['model'])}, interpolation "
                 f"{_f(cv['interpolation'])}, line {_f(cv['line'])}")
    return "; ".join(parts) + "."


def dce_rows():
    """The DCE study's Table 2 bottom rows, as printed (the project's copy, analysis/data)."""
    with open(DCE_SUMMARY, newline="") as f:
        rows = list(csv.reader(ln for ln in f if ln.strip() and not ln.startswith("#")))
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def items(models, table, text):
    """The section's items: for each transport (models {transport: (file name, model dict)}), its unit
    costs and its rows; then the paper's Table 2. table(title, columns, rows, source) and text(str) make
    the report's objects."""
    out = [text(INTRO)]
    if not models:
        out.append(text("No model file: run `rpcscope model RUN --transport udp` (and tcp) after `rpcscope rtp RUN`."))
    for transport, (fname, m) in models.items():
        out.append(table(f"Unit costs, {transport.upper()} ({m['link_described']})",
                         ["unit cost", "value", "unit", "one count is"], param_rows(m),
                         f"analysis/{fname} params[]"))
        out.append(table(f"Calculated vs measured RTT, {transport.upper()}",
                         ["size", "kind", "measured_us", "spread_%", "model_us", "model_%", "cv_%", "interp_%",
                          "line_%", "goal", "met"], size_rows(m),
                         f"analysis/{fname} rows[] (spread: half the spread of the rounds' untraced p50s; cv: "
                         f"the fit without that size)"))
        out.append(text(f"{transport.upper()}: {summary_sentence(m)}"))
    out.append(table("Beside it: the DCE study's Table 2 (bottom rows, as printed; µs on IBM RS/6000s over "
                     "10 Mbit/s Ethernet)", ["request_bytes", "calculated_us", "measured_us", "percent_error"],
                     dce_rows(), "analysis/data/dce_table2_summary.csv, transcribed from the DCE study"))
    return out


def percent_errors(m):
    """{size: % error} of a model file's rows, for the report's headline."""
    return {str(r["size"]): r["error_pct"] for r in m.get("rows", [])}
