"""`rpcscope bench analysis` on the committed fixture run (tests/python/fixtures/run-udp-small):
it measures in fresh processes, counts the events every trace holds, and leaves the run alone."""
import json
import pathlib
import shutil

from rpcscope.analysis import bench, traceread
from rpcscope.cli import main as cli_main

RUN = pathlib.Path(__file__).parent / "fixtures" / "run-udp-small"


def test_bench_counts_every_event_and_leaves_the_run_alone(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("analysis"))
    res = bench.bench(run, do_analyze=True)
    rows = {r["measurement"]: r for r in res["measurements"]}
    total = sum(len(traceread.read_trace(p)) for _, p in bench.load_run(run).trace_dirs())
    assert total > 0
    assert rows["decode (first)"]["events"] == rows["decode (cached)"]["events"] == total
    assert rows["decode (first)"]["decoded_events"] == total and rows["decode (cached)"]["decoded_events"] == 0
    assert rows["analyze (first)"]["events"] == total and rows["analyze (first)"]["events_read"] >= total
    assert rows["analyze (first)"]["peak_rss_mib"] > 0 and rows["analyze (first)"]["tables_mib"] > 0
    whole = rows["analyze (cached), each case in one window"]
    assert whole["events"] == total and whole["beyond_tables_mib"] is not None
    assert all(r["events_per_s"] > 0 for r in res["measurements"])
    anchor = rows["babeltrace2 -o dummy (anchor)"]        # babeltrace2's own reader over the same traces
    assert anchor["events"] == total and anchor["processes"] == len(bench.load_run(run).trace_dirs())
    assert res["anchor_events_per_s"] == anchor["events_per_s"] and anchor["of_anchor"] == 1.0
    first = rows["decode (first)"]
    assert first["of_anchor"] == round(first["events_per_s"] / anchor["events_per_s"], 3)
    assert not (run / "analysis").exists()          # its own cache and outputs were not touched
    assert cli_main(["bench", "analysis", str(run), "--no-analyze", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["goal_events_per_s"] == 1_000_000 and len(j["measurements"]) == 5


def test_bench_on_a_directory_without_a_run_says_so(tmp_path, capsys):
    assert cli_main(["bench", "analysis", str(tmp_path)]) == 2
    assert "manifest" in capsys.readouterr().err


def test_anchor_says_which_trace_babeltrace2_could_not_read(tmp_path):
    bad = tmp_path / "kernel"
    bad.mkdir()
    (bad / "metadata").write_text("/* CTF 1.8 */ not metadata\n")
    try:
        bench._anchor([bad])
    except bench.UserError as e:
        assert str(bad) in str(e) and "babeltrace2 could not read" in str(e)
    else:
        raise AssertionError("a trace babeltrace2 cannot read was timed as if read")
