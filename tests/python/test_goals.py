"""rpcscope goals: the model's % error over several runs (analysis/goals.py), on synthetic error rows
and on the committed fixture run (tests/python/fixtures/README.md) analysed in a tmp copy."""
import json
import shutil
from pathlib import Path

import pytest

from rpcscope.analysis import goals as G
from rpcscope.cli import main

FIX = Path(__file__).parent / "fixtures" / "run-udp-small"


def _row(size, pct, held=False):
    goal = 5.0 if held else 2.0
    return {"size": size, "percent_error": pct, "holdout": held, "goal_pct": goal, "goal_met": abs(pct) <= goal}


def test_gather_counts_misses_per_run_and_spreads_per_size():
    per_run = [("a", {"udp": [_row(0, -4.5), _row(1393, 4.0, held=True)], "tcp": [_row(0, 1.0)]}),
               ("b", {"udp": [_row(0, 1.5), _row(1393, 6.0, held=True)], "tcp": [_row(0, -2.5)]}),
               ("c", {"udp": [_row(0, 0.5), _row(1393, -1.0, held=True)]})]
    runs, sizes = G.gather(per_run)
    assert [(r["run"], r["met"], r["sizes"]) for r in runs] == [("a", 2, 3), ("b", 1, 3), ("c", 2, 2)]
    assert runs[0]["misses"] == ["udp 0: -4.5"] and runs[1]["misses"] == ["udp 1393: +6.0", "tcp 0: -2.5"]
    assert [(z["transport"], z["size"], z["fit"], z["runs"], z["met"]) for z in sizes] == [
        ("udp", 0, "fitted", 3, 2), ("udp", 1393, "holdout", 3, 2), ("tcp", 0, "fitted", 2, 1)]
    assert (sizes[0]["median_pct"], sizes[0]["least_pct"], sizes[0]["greatest_pct"]) == (0.5, -4.5, 1.5)


def test_gather_names_sizes_whose_untraced_run_took_another_path():
    away = dict(_row(8032, 25.2), untraced_path_same=False)
    per_run = [("a", {"udp": [dict(_row(0, 0.5), untraced_path_same=True), away]}),
               ("b", {"udp": [_row(0, 3.0), dict(_row(8032, 1.0), untraced_path_same=True)]})]
    runs, sizes = G.gather(per_run)
    assert runs[0]["misses"] == ["udp 8032: +25.2 other path"] and runs[0]["other_path"] == 1
    assert runs[1]["misses"] == ["udp 0: +3.0"] and runs[1]["other_path"] == 0
    z = {x["size"]: x for x in sizes}
    assert (z[8032]["met"], z[8032]["other_path"], z[8032]["met_same_path"]) == (1, 1, 1)
    assert (z[0]["met"], z[0]["other_path"], z[0]["met_same_path"]) == (1, 0, 1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("goals") / "run"
    shutil.copytree(FIX, d)
    assert main(["analyze", str(d), "--quiet"]) == 0
    assert main(["rtp", str(d), "--quiet"]) == 0
    assert main(["model", str(d), "--corrected", "--transport", "udp", "--json"]) == 0
    return d


def test_goals_of_the_saved_model_and_of_a_refit_agree(run, capsys):
    capsys.readouterr()
    assert main(["goals", str(run), "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert main(["goals", str(run), "--refit", "--json"]) == 0
    refit = json.loads(capsys.readouterr().out)
    model = json.loads((run / "analysis" / "model.json").read_text())
    assert saved["sizes"] == refit["sizes"] == len(model["sizes"]) == 2
    assert saved["runs"][0]["cpu_lost_pct"] is None       # the fixture predates the CPU speed checks
    for z in saved["per_size"]:
        s = str(z["size"])
        want = (model["measured_us"][s] - model["calculated_us"][s]) * 100 / model["measured_us"][s]
        assert z["median_pct"] == pytest.approx(want) and z["runs"] == 1
    assert [z["median_pct"] for z in refit["per_size"]] == pytest.approx([z["median_pct"] for z in saved["per_size"]])
    # The table a person reads, and the errors that name what to do.
    assert main(["goals", str(run)]) == 0
    out = capsys.readouterr().out
    assert "model goals over 1 run(s)" in out and "median_%" in out
    assert main(["goals", str(run.parent)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["goals", str(run), "--holdout", "8032"]) == 2
    assert "--refit" in capsys.readouterr().err


def test_goals_without_a_model_file_says_how_to_make_one(run, tmp_path, capsys):
    d = tmp_path / "bare"
    shutil.copytree(run, d)
    for f in (d / "analysis").glob("model*.json"):
        f.unlink()
    assert main(["goals", str(d)]) == 2
    err = capsys.readouterr().err
    assert "no model file" in err and "--corrected" in err


def test_goals_give_each_runs_cpu_time_lost(run, tmp_path, capsys):
    d = tmp_path / "checked"
    shutil.copytree(run, d)
    m = json.loads((d / "manifest.json").read_text())
    cpu = {"cpu": 0, "slices": 10, "min_ns": 1000, "p50_ns": 1000, "max_ns": 3000}
    m["cpu_speed"] = {"tool": "rpc-cpuspeed", "checks": [{"when": "start", "cpus": [dict(cpu, sum_ns=10000)]},
                                                         {"when": "udp sweep 1", "cpus": [dict(cpu, sum_ns=12500)]},
                                                         {"when": "udp sweep 2", "cpus": [dict(cpu, sum_ns=20000)]}]}
    (d / "manifest.json").write_text(json.dumps(m))
    capsys.readouterr()
    assert main(["goals", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["cpu_lost_pct"] == {"median": 20.0, "max": 50.0}
    assert main(["goals", str(d)]) == 0
    out = capsys.readouterr().out
    assert "cpu_lost_%" in out and "20.0 / 50.0" in out
