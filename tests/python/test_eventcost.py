"""`rpcscope bench event-cost` with real perf and a real tracefs instance (collectors/eventcost.py): every
tracer records exactly the child's two events per call (the filter matches it and nothing else),
and nothing is left behind. No timing is asserted: the figures are the benchmark's to report."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from rpcscope.collectors import eventcost, perf

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not perf.tracepoint_available(eventcost.EVENTS[0]),
                                reason="needs root, perf and tracefs")


def _leftovers():
    inst = sorted(p.name for p in (perf.TRACEFS / "instances").glob("rpcscope-evcost-*"))
    procs = subprocess.run(["pgrep", "-f", eventcost.COMM], capture_output=True, text=True).stdout.split()
    return inst, procs


def test_every_tracer_records_two_events_a_call_and_leaves_nothing():
    out = subprocess.run([sys.executable, "-m", "rpcscope.cli", "bench", "event-cost", "--calls", "3000",
                          "--rounds", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    rows = {r["mode"]: r for r in res["rows"]}
    assert list(rows) == list(eventcost.MODES)
    assert rows["untraced"]["events_per_call"] == 0 and rows["untraced"]["ns_per_event"] is None
    for m in ("perf", "perf counting", "ftrace"):
        assert rows[m]["events_per_call"] == 2.0, rows[m]
        assert rows[m]["lost"] == 0 and rows[m]["ns_per_event"] is not None
    # Paused: the same instance's events hit but nothing written; its cost is per event hit (ftrace's 2).
    paused = rows["ftrace paused"]
    assert paused["events_per_call"] == 0 and paused["lost"] == 0
    # The rows' ns per call are rounded to 0.1 ns and ns_per_event comes from the unrounded medians:
    # recomputed from the rows it can differ by the roundings (0.05 / 2 each, and its own 0.05).
    assert paused["ns_per_event"] == pytest.approx(
        (paused["ns_per_call"] - rows["untraced"]["ns_per_call"]) / 2.0, abs=0.1 + 1e-9)
    assert _leftovers() == ([], [])


def test_bad_options_are_refused_before_anything_starts():
    for argv, msg in ((["--calls", "0"], "--calls"), (["--cpu", "99"], "CPU 99")):
        p = subprocess.run([sys.executable, "-m", "rpcscope.cli", "bench", "event-cost", *argv], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and msg in p.stderr, p.stderr
    assert _leftovers() == ([], [])


def test_an_instance_is_removed_when_closed():
    inst = eventcost.FtraceInstance(buffer_kb=64)
    assert inst.path.is_dir()
    assert (inst.path / "trace_clock").read_text().find("[mono]") >= 0
    inst.close()
    assert not inst.path.exists()
    inst.close()                    # twice: nothing to do
    assert pathlib.Path(perf.TRACEFS / "instances").is_dir()
