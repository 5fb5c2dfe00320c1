"""The per-RPC table: `rpcscope analyze` writes it (analysis/rpcs.jsonl.gz) and `rpcscope report --per-rpc`
reads it, not the traces."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rpcscope.analysis.rpcs import MEASURED, ROW_ORDER, reconstruct
from rpcscope.analysis.rpctable import RpcTableError, read_rpc_table
from rpcscope.analysis.run import load_run
from rpcscope.cli import main
from rpcscope.reports.data import RPCS_SOURCE, load
from rpcscope.rundir import RPCS_FORMAT, RunDir

FIX = Path(__file__).parent / "fixtures" / "run-udp-small"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("rpctable") / "run"
    shutil.copytree(FIX, d)
    assert main(["analyze", str(d), "--quiet", "--workers", "1"]) == 0
    return d


def test_analyze_writes_every_rpc_of_every_row(run):
    table = read_rpc_table(run)
    fresh = load_run(run)
    assert sorted(table) == sorted(c.id for c in fresh.cases if c.complete)
    for case in fresh.cases:
        r = reconstruct(case)
        t = table[case.id]
        assert t.call_ids == [int(c) for c in r.call_ids] and len(t.call_ids) > 0
        assert list(t.dur_ns) == ROW_ORDER
        for name in ROW_ORDER:
            row = r.rows[name]
            m = row.status == MEASURED
            assert [s == "m" for s in t.status[name]] == m.tolist(), name
            got = np.array([np.nan if v is None else v for v in t.dur_ns[name]], float)
            assert np.array_equal(got[m], np.round(row.dur[m])), name
        assert t.measured_us("RTT") == pytest.approx((row_rtt := r.rows["RTT"]).dur[row_rtt.status == MEASURED] / 1e3)


def test_report_per_rpc_reads_the_table(run):
    d = load(run, per_rpc=True)
    table = read_rpc_table(run)
    assert d.per_rpc == {cid: t.measured_us("RTT") for cid, t in table.items()}
    assert all(d.per_rpc.values()) and RPCS_SOURCE in d.per_rpc_source
    case = d.cases[0]
    assert d.latency(case)["traced (per RPC, trace)"]["values"] == d.per_rpc[case["id"]]


def test_a_run_analysed_without_the_table_is_told_to_analyse_again(run, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(run, d)
    RunDir(d).rpcs_table.unlink()
    assert main(["report", str(d), "--per-rpc", "--no-calls"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"rpcscope analyze {d}" in err[0] and "Traceback" not in err[0]


def test_a_table_of_another_format_is_refused_with_one_line(tmp_path):
    rd = RunDir(tmp_path)
    rd.analysis.mkdir()
    with gzip.open(rd.rpcs_table, "wt") as f:
        f.write(json.dumps({"format": RPCS_FORMAT + "0"}) + "\n")
    with pytest.raises(RpcTableError, match=r"format .*this rpcscope reads .*rpcscope analyze"):
        read_rpc_table(tmp_path)
    rd.rpcs_table.write_bytes(b"not gzip")
    with pytest.raises(RpcTableError, match="unreadable"):
        read_rpc_table(tmp_path)
