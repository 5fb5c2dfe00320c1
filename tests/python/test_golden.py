"""End to end on a small real capture in today's format (fixtures/run-e2e: both transports, four
sizes): `rpcscope analyze`, `rtp`, `model` (per transport, 8032 predicted) and `report` run as a user
runs them, and what they write is compared with committed golden files (fixtures/run-e2e.golden/):
per-step tables, the round-trip path, the model and the report's headline. A change to any stage
that moves a figure fails here; after a deliberate one, regenerate the golden files with

    RPCSCOPE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/python/test_golden.py

and read the diff (`git diff tests/python/fixtures/run-e2e.golden/`) before committing it."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
from helpers import RPCSCOPE

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
RUN = FIXTURES / "run-e2e"
GOLDEN = FIXTURES / "run-e2e.golden"
UPDATE = bool(os.environ.get("RPCSCOPE_UPDATE_GOLDEN"))


def rpcscope(*args):
    p = subprocess.run(RPCSCOPE + [str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"rpcscope {args}: {p.stdout}\n{p.stderr}"
    return p.stdout


def r(v, nd=3):
    return None if v is None else round(float(v), nd)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e") / "run"
    shutil.copytree(RUN, d)
    rpcscope("analyze", d, "--quiet")
    rpcscope("rtp", d, "--quiet")
    for t in ("udp", "tcp"):
        rpcscope("model", d, "--transport", t, "--holdout", "8032")
    report = json.loads(rpcscope("report", d, "--json", "--no-calls"))
    a = d / "analysis"
    steps = json.loads((a / "steps.json").read_text())
    rtp = json.loads((a / "rtp.json").read_text())
    return {
        "steps": {f"{s['case']} {s['step']}": [s["status"], s["n"], r(s.get("median_us")),
                                                 r(s.get("corrected_median_us"))] for s in steps["steps"]},
        "rtp": {c["case"]: {"rpcs": c["rpcs"], "clean": c["clean"],
                            "path": [[p["segment"], r(p["typical_count"], 2), r(p["typical_corrected_ns"], 0)]
                                     for p in c["path"]]} for c in rtp["cases"]},
        **{f"model-{t}": _model(json.loads((a / f"model-{t}.json").read_text())) for t in ("udp", "tcp")},
        "report": {"figures": sorted(pathlib.Path(f).name for f in report["figures"]),
                   "rtt": report["summary"]["rtt"], "missing": report["summary"]["missing"],
                   "models_percent_error": {t: {z: r(e) for z, e in v.items()}
                                            for t, v in report["summary"]["models_percent_error"].items()}},
        "wake_events": {f"{s['case']} {s['step']}": s.get("tracepoints_median") for s in steps["steps"]
                        if s["step"] in ("S2", "C16") and s["status"] == "measured"},
    }


def _model(m):
    return {"fitted_sizes": m["fitted_sizes"], "link": m["link"],
            "params": {p["name"]: [r(p["value"], 6), p["fitted"]] for p in m["params"]},
            "rows": [[x["size"], x["kind"], r(x["calculated_us"]), r(x["measured_us"]), r(x["error_pct"]),
                      r(x["interp_error_pct"]), r(x["line_error_pct"])] for x in m["rows"]]}


@pytest.mark.parametrize("name", ["steps", "rtp", "model-udp", "model-tcp", "report"])
def test_stage_output_matches_its_golden_file(outputs, name):
    path = GOLDEN / f"{name}.json"
    got = json.loads(json.dumps(outputs[name]))
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    assert got == want, f"{name} differs from {path}: regenerate deliberately (module docstring) or fix the change"


def test_the_golden_model_predicts_its_held_out_size(outputs):
    for t in ("udp", "tcp"):
        rows = {row[0]: row for row in outputs[f"model-{t}"]["rows"]}
        assert rows[8032][1] == "predicted" and rows[8032][3] and rows[8032][4] is not None
        assert [z for z, row in rows.items() if row[1] == "fitted"] == [0, 1392, 4016]


def test_a_wake_up_is_charged_the_waking_that_begins_it(outputs):
    """The server's and the client's wake-ups (S2, C16) run from the waking, recorded on the waker's CPU,
    to the switch in on the woken thread's: each is charged that waking, whose recording delays the wake."""
    got = outputs["wake_events"]
    assert len(got) == 16 and all(n is not None and n >= 1 for n in got.values()), got
