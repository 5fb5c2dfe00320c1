"""The report's verification section: a what-if's prediction (`rpcscope whatif --out`) set beside this
run's measurement by `rpcscope verify PREDICTION RUN`, read from RUN/analysis/verify-TRANSPORT.json as
verify wrote it: its rows are computed once there, and printed here as they are."""
from __future__ import annotations

import json

from rpcscope.analysis.model_cli import VERIFY_COLUMNS, verify_table_rows
from rpcscope.rundir import VERIFY_FORMAT, RunDir

from .objects import Section, Table


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


def section(docs):
    """The section for {transport: verification document}."""
    s = Section("The model's prediction beside this run (rpcscope verify)", folded=False)
    s.items.append("A model fitted on another capture laid the calls out on this run's link (`rpcscope whatif`); "
                   "each size's prediction beside what this run measured. % error = (measured − predicted) × 100 "
                   "/ measured; goal within 5 %. %error_vs_null, where the link adds no wire time: the same with "
                   "each side over its own null call, which takes out the host's speed between the two captures.")
    for t, d in sorted(docs.items()):
        source = f"analysis/verify-{t}.json (from {d.get('prediction')}, a model of {d.get('model_source')})"
        s.items.append(Table(f"{t.upper()} {d.get('proc')}: {d.get('link_described')}", VERIFY_COLUMNS,
                             verify_table_rows(d.get("rows") or []), source))
        for n in d.get("notes") or []:
            s.items.append(f"Note: {n}.")
    return s
