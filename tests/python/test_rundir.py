"""The run directory's contract (rpcscope/rundir.py): its paths, the manifest's checks and dataclasses,
the outputs' format strings, and the layers that read and write it."""
import ast
import json
import pathlib

import pytest

from rpcscope import ROOT, rundir
from rpcscope.analysis import model, rtp, traceread
from rpcscope.analysis.run import RunError, load_run
from rpcscope.rundir import Manifest, ManifestError, RunDir

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "run-udp-small"


def _manifest(**over):
    m = {"format": 1, "complete": True, "interrupted": False, "params": {"calls": 10, "warmup": 2},
         "testbed": {"kind": "local", "shared_kernel": True,
                     "link": {"rate": "1gbit", "rate_bit": 10 ** 9, "mtu": 1500}},
         "hosts": {"rpcs-client": {"role": "client", "cpus": [0]}, "rpcs-server": {"role": "server", "cpus": [1]}},
         "cases": [{"id": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "calls": 10, "warmup": 2,
                    "dir": "cases/udp-maxarg-0", "complete": True, "untraced": {"p50": 30000},
                    "traced": {"p50": 41000}, "clock_reads": {"client_p50_ns": 31000},
                    "repeats": {"rounds": 3, "kept_round": 1}}]}
    m.update(over)
    return m


def test_every_path_is_named_under_the_run():
    rd = RunDir("runs/x")
    assert rd.manifest_path == pathlib.Path("runs/x/manifest.json")
    assert rd.capture_state == pathlib.Path("runs/x/capture-state.json")
    assert rd.case_dir("udp-null-0") == pathlib.Path("runs/x/cases/udp-null-0")
    assert RunDir.case_rel("udp-null-0") == "cases/udp-null-0"
    assert rd.steps_json == pathlib.Path("runs/x/analysis/steps.json")
    assert rd.probe_json == pathlib.Path("runs/x/analysis/probe.json")
    assert rd.rtp_json == pathlib.Path("runs/x/analysis/rtp.json")
    assert rd.model_json("tcp") == pathlib.Path("runs/x/analysis/model-tcp.json")
    assert rd.report_html == pathlib.Path("runs/x/report/index.html")


def test_the_manifest_reads_as_dataclasses(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_manifest(_manifest())
    assert not (tmp_path / "manifest.json.tmp").exists()
    m = rd.load_manifest()
    assert isinstance(m, Manifest) and m.format == 1 and m.complete and not m.interrupted
    assert m.testbed.link.mtu == 1500 and m.testbed.shared_kernel and m.testbed.virtual_link
    assert m.host_of("server") == "rpcs-server" and m.hosts["rpcs-client"].cpus == (0,)
    c = m.cases[0]
    assert (c.id, c.transport, c.size, c.untraced_p50, c.traced_p50, c.clock_p50) == \
        ("udp-maxarg-0", "udp", 0, 30000, 41000, 31000)
    assert c.rounds == 3 and c.kept_round == 1 and c.raw["dir"] == "cases/udp-maxarg-0"


@pytest.mark.parametrize("text, words", [
    (None, "is not a run directory: no manifest.json"),
    ("{", "unreadable manifest"),
    (json.dumps(_manifest(format=2)), "manifest format 2, this rpcscope reads format 1"),
    (json.dumps(_manifest(format=None)), "manifest format None"),
    (json.dumps(_manifest(cases={"x": 1})), '"cases" is {"x": 1}, not a list of cases'),
    (json.dumps(_manifest(testbed={"link": 5})), "testbed.link is 5, not an object"),
])
def test_a_wrong_manifest_is_one_line_naming_the_file(tmp_path, text, words):
    if text is not None:
        (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError) as e:
        RunDir(tmp_path).load_manifest()
    msg = str(e.value)
    assert words in msg and "\n" not in msg, msg
    with pytest.raises(RunError) as e2:          # the analysis refuses it with the same line
        load_run(tmp_path)
    assert str(e2.value) == msg


def test_the_fixture_run_loads_through_the_contract():
    m = RunDir(FIXTURE).load_manifest()
    assert [c.id for c in m.cases] == [c.id for c in load_run(FIXTURE).cases]


def test_the_outputs_format_strings_are_the_writers():
    assert rundir.MODEL_FORMAT == model.MODEL_FORMAT
    assert rundir.PREDICTION_FORMAT == model.PREDICTION_FORMAT
    assert rundir.RTP_FORMAT == rtp.RTP_FORMAT
    assert rundir.CLOCKMARK_FORMAT == traceread.CLOCKMARK_FORMAT


def _imports(path):
    """(module-level imports, imports inside a function or class) of one file: the modules named."""
    tree = ast.parse(path.read_text())
    top, inner = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [("." * node.level) + (node.module or "")]
            (top if node in tree.body else inner).extend(names)
    return top, inner


def _project(names):
    return [n for n in names if n.startswith(".") or n.startswith("rpcscope")]


def test_the_layers_import_the_project_at_the_top_of_each_file():
    for layer in ("analysis", "reports", "collectors"):
        for f in sorted((ROOT / layer).glob("*.py")):
            _, inner = _imports(f)
            assert not _project(inner), f"{f.relative_to(ROOT)} imports {_project(inner)} inside a function"


def test_analysis_and_reports_import_no_collector():
    for layer in ("analysis", "reports"):
        for f in sorted((ROOT / layer).glob("*.py")):
            top, inner = _imports(f)
            bad = [n for n in top + inner if "collectors" in n]
            assert not bad, f"{f.relative_to(ROOT)} imports {bad}: the collectors write the contract, " \
                            "the analysis and reports read it (rpcscope/rundir.py)"


def test_the_capture_modules_import_at_the_top_and_stay_small():
    for name in ("capture", "options", "processes", "rounds", "sweeps", "tracing", "manifest"):
        f = ROOT / "collectors" / f"{name}.py"
        _, inner = _imports(f)
        assert not inner, f"collectors/{name}.py imports {inner} inside a function"
        assert len(f.read_text().splitlines()) <= 700, f"collectors/{name}.py is over 700 lines"
    _, inner = _imports(ROOT / "rpcscope" / "rundir.py")
    assert not inner
