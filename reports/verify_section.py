"""The report's verification section: a what-if's prediction (`rpcscope whatif --out`) set beside this
run's measurement by `rpcscope verify PREDICTION RUN`, read from RUN/analysis/verify-TRANSPORT.json as
verify wrote it: its rows are computed once there, and printed here as they are."""
from __future__ import annotations

import json

from rpcscope.rundir import VERIFY_FORMAT, RunDir

from .objects import Section, Table

COLUMNS = ["size", "predicted_us", "measured_us", "spread_%", "%error", "met", "%error_vs_null"]


def load(path):
    """{transport: verification document} of the run's analysis/verify-TRANSPORT.json (VERIFY_FORMAT files
    only; an unreadable one is left out)."""
    out = {}
    for f in RunDir(path).verify_jsons():
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("format") == VERIFY_FORMAT and d.get("transport"):
            out[d["transport"]] = d
    return out


def _f(v, nd=2):
    return "" if v is None else f"{v:.{nd}f}"


def rows(doc):
    return [{"size": r.get("size"), "predicted_us": _f(r.get("predicted_us")), "measured_us": _f(r.get("measured_us")),
             "spread_%": _f(r.get("spread_pct"), 1), "%error": _f(r.get("error_pct")),
             "met": "" if r.get("met") is None else ("yes" if r["met"] else "NO"),
             "%error_vs_null": _f(r.get("vs_null_error_pct"))} for r in doc.get("rows") or [] if isinstance(r, dict)]


def section(docs):
    """The section for {transport: verification document}."""
    s = Section("The model's prediction beside this run (rpcscope verify)", folded=False)
    s.items.append("A model fitted on another capture laid the calls out on this run's link (`rpcscope whatif`); "
                   "each size's prediction beside what this run measured. % error = (measured − predicted) × 100 "
                   "/ measured; goal within 5 %. %error_vs_null, where the link adds no wire time: the same with "
                   "each side over its own null call, which takes out the host's speed between the two captures.")
    for t, d in sorted(docs.items()):
        source = f"analysis/verify-{t}.json (from {d.get('prediction')}, a model of {d.get('model_source')})"
        s.items.append(Table(f"{t.upper()} {d.get('proc')}: {d.get('link_described')}", COLUMNS, rows(d), source))
        for n in d.get("notes") or []:
            s.items.append(f"Note: {n}.")
    return s
