"""The model on the real testbed, reduced: a capture fitted at three sizes predicts a fourth it measured
but never fitted, and a what-if for a 10 Mbit/s link, made from the unshaped capture, is set beside a
capture of the testbed shaped to 10 Mbit/s by `rpcscope verify`. Timing goals are not judged here (the
model's % errors are the report's and the closing figures'); what is checked is that every stage runs
on real captures and says where each number came from."""
import json
import os
import shutil

import helpers
import pytest
from helpers import module_testbed

CAPTURE = ["--transport", "udp", "--proc", "maxarg", "--calls", "300", "--warmup", "30", "--kernel", "ftrace",
           "--calibration", "quick", "--calibration-calls", "300", "--repeats", "1"]

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.tracing,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "lttng", "babeltrace2", "tc")),
                       reason="needs iproute2, openssh-server, lttng-tools, babeltrace2 (make bootstrap)"),
]


def rpcscope(*args, timeout=600):
    """rpcscope ARGS, asserted to exit 0: a capture or a model stage may take minutes here."""
    return helpers.rpcscope(*args, timeout=timeout)


@pytest.fixture(scope="module")
def testbed():
    with module_testbed():
        rpcscope("deploy", timeout=600)
        yield


def test_three_fitted_sizes_predict_a_fourth_and_a_shaped_link(testbed, tmp_path):
    run = tmp_path / "unshaped"
    rpcscope("capture", "--sizes", "0,1392,4016,8032", "--holdout", "8032", *CAPTURE, "--out", run)
    rpcscope("analyze", run, "--quiet")
    rpcscope("rtp", run, "--quiet")
    doc = json.loads(rpcscope("model", run, "--transport", "udp", "--json").stdout)
    assert doc["fitted_sizes"] == [0, 1392, 4016] and doc["link"]["kind"] == "none"
    rows = {r["size"]: r for r in doc["rows"]}
    assert rows[8032]["kind"] == "predicted" and rows[8032]["measured_us"] > 0
    assert rows[8032]["interp_error_pct"] is not None and rows[8032]["error_pct"] is not None
    # Three fitted sizes leave none out: a fit needs three (MIN_SIZES), so no cross-validation.
    assert all(rows[z]["cv_error_pct"] is None for z in (0, 1392, 4016))
    fitted = [p for p in doc["params"] if p["fitted"]]
    assert 0 < len(fitted) <= 10 and all(p["value"] >= 0 for p in doc["params"])
    assert "unclassified_segments" not in doc["inputs"], doc["inputs"]
    # What the unshaped capture predicts for the testbed shaped to 10 Mbit/s ...
    pred = tmp_path / "p10.json"
    out = rpcscope("whatif", run / "analysis" / "model-udp.json", "--link-rate", "10mbit", "--predict", "0,1392",
                   "--out", pred).stdout
    assert "10mbit token bucket" in out
    # ... set beside a capture of it.
    rpcscope("testbed", "up", "--link-rate", "10mbit", "--json", timeout=180)
    try:
        shaped = tmp_path / "shaped"
        rpcscope("capture", "--sizes", "0,1392", *CAPTURE, "--out", shaped)
    finally:
        rpcscope("testbed", "up", "--json", timeout=180)             # unshaped again
    man = json.loads((shaped / "manifest.json").read_text())
    assert man["testbed"]["link"]["rate_bit"] == 10_000_000
    v = json.loads(rpcscope("verify", pred, shaped, "--json").stdout)
    assert v["notes"] == [] and [r["size"] for r in v["rows"]] == [0, 1392]
    for r in v["rows"]:
        assert r["measured_us"] > 0 and r["error_pct"] is not None, r
    # At 1392 the bucket sets the pace: 1514 + 38 bytes of frames per call at 1.25 bytes/us.
    big = next(r for r in json.loads(pred.read_text())["rows"] if r["size"] == 1392)
    assert big["paced_by"] == "token bucket" and big["calculated_us"] == pytest.approx(1552 * 0.8)
