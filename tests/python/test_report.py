"""rpcscope report on the committed real fixture run (copied to a tmp dir)."""
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rpcscope.analysis import model as M
from rpcscope.analysis.network import Link
from rpcscope.analysis.pathsim import BYTE_UNITS, CLASSES, Workload, call_path
from rpcscope.cli import main
from rpcscope.reports import report as R, svg as svgfig
from rpcscope.reports.report import clock_check_tables

FIX = Path(__file__).parent / "fixtures" / "run-udp-small"


def write_model(d, transport):
    """A model file as `rpcscope model` writes it, fitted on path class times laid out by the model's own
    path at known unit costs (the fixture captured two sizes, fewer than a fit needs)."""
    truth = {"call": 9.0, "send": 2.5, "packet": 1.7, "receive": 2.2, "wakeup": 3.9, "ack": 0.8,
             "marshal": 0.0004, "copy_in": 0.0011, "copy_out": 0.0007, "carry": 0.0006}
    wl, sizes = Workload(transport), {}
    for z in (0, 1392, 4016, 8032, 16064, 24096, 30000):
        cp = call_path(wl, z, truth)
        cls = {c: truth[c] * cp.counts.get(c, 0) + truth.get(BYTE_UNITS.get(c), 0.0) * cp.bytes_by_class.get(c, 0)
               for c in CLASSES}
        sizes[z] = M.SizeObservation(z, cp.rtt_us * 1.01, 0.5, cls, 0.0, sum(cls.values()))
    m = M.fit(M.Observations(transport, "maxarg", Link(), sizes, str(d)), [0, 1392, 4016, 8032, 16064, 24096])
    (d / "analysis" / f"model-{transport}.json").write_text(json.dumps(m.to_json()))
    return m


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("rep") / "run"
    shutil.copytree(FIX, d)
    assert main(["analyze", str(d), "--quiet"]) == 0
    write_model(d, "udp")
    return d


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_report_writes_md_html_and_svgs(run, capsys):
    assert main(["report", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    html = Path(out["html"]).read_text()
    p = _Tags()
    p.feed(html)
    tags = [t for t, _ in p.tags]
    assert tags.count("svg") >= 5
    # self-contained: no external resources
    assert not any(a.get("src") or (t == "link") for t, a in p.tags)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    md = Path(out["markdown"]).read_text()
    for s in ("Run summary", "Calculated vs measured RTT, UDP", "Unit costs, UDP", "Per-step costs",
              "catalog flags, not measured", "RTT vs request size", "Latency distributions", "source:", "% error"):
        assert s in html and (s in md or s == "catalog flags, not measured")
    assert 'class="step overlapped"' in html and 'class="step rtp"' in html
    assert "(Measured − Calculated) × 100 / Measured" in html
    assert "1388/1389" in html        # maxarg: body 1392/1396 = first extra IP packet
    # The fixture was captured before the manifest recorded its kernel event set (all events, then).
    assert re.search(r"kernel event set \| full \(not recorded\) \|", md), md[:3000]


def test_report_shows_every_transports_model(run, tmp_path, capsys):
    """One model file per transport (rpcscope model RUN --transport T): the report has the unit costs,
    the rows with their baselines and a summary sentence for each, each with its source."""
    d = tmp_path / "run"
    shutil.copytree(run, d)
    m = write_model(d, "tcp")
    assert main(["report", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(out["summary"]["models_percent_error"]) == ["tcp", "udp"]
    md = Path(out["markdown"]).read_text()
    for t in ("UDP", "TCP"):
        assert f"Calculated vs measured RTT, {t}" in md and f"Unit costs, {t}" in md
        assert f"{t}: 6 of 6 fitted sizes within 2 %" in md
    assert "source: analysis/model-udp.json rows[]" in md and "source: analysis/model-tcp.json params[]" in md
    row = next(r for r in m.rows() if r.size == 30000)
    assert row.kind == "predicted" and f"| 30000 | predicted | {row.measured_us:.2f} |" in md


def test_report_names_the_cases_whose_untraced_run_took_another_path(run, tmp_path, capsys):
    """The run summary, the traced-vs-untraced table, the Table-2 table and the verdict say where the
    untraced run slept or was woken otherwise than the traced one (manifest.json cases[].sleeps_per_call;
    the fixture predates the counts, so they are written in here as a capture records them)."""
    d = tmp_path / "run"
    shutil.copytree(run, d)
    m = json.loads((d / "manifest.json").read_text())
    same = {"client": 2.0, "server": 2.0, "client_ipi": 0.0, "server_ipi": 0.0}
    for c in m["cases"]:
        c["sleeps_per_call"] = {"untraced": dict(same), "traced": dict(same, server=2.03, server_ipi=0.01)}
    m["cases"][-1]["sleeps_per_call"]["untraced"].update(server=3.0, server_ipi=0.9)
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["report", str(d), "--json"]) == 0
    md = Path(json.loads(capsys.readouterr().out)["markdown"]).read_text()
    last = m["cases"][-1]
    assert (f"another path than the traced run's at 1 of {len(m['cases'])} cases: {last['id']} (sleeps "
            "client/server 2.00/3.00 untraced, 2.00/2.03 traced; IPIs 0.00/0.90 against 0.00/0.01)") in md
    assert "| 2.00/3.00 | 2.00/2.03 | 0.00/0.90 | 0.00/0.01 | NO |" in md


def test_report_draws_the_clients_histogram_of_every_call(run, tmp_path, capsys):
    """Where the client recorded rtt_hist (rpc-client --json; the fixture has none, so a two-mode
    one is written in as a client records it), the CDF follows its bins and a
    histogram figure shows both modes, with the calls beyond its range counted in the legend."""
    d = tmp_path / "run"
    shutil.copytree(run, d)
    case = json.loads((d / "manifest.json").read_text())["cases"][0]
    f = d / case["dir"] / "client-untraced.json"
    client = json.loads(f.read_text())
    counts = [0] * 120
    counts[0], counts[5], counts[100], counts[119] = 300, 400, 280, 10   # fast mode, slow mode 10 us on
    client["rtt_hist"] = {"bin_ns": 100, "from_ns": 20000, "above": 10, "counts": counts}
    f.write_text(json.dumps(client))
    assert R._histogram_cdf(client["rtt_hist"] | {"from_us": 20.0, "bin_us": 0.1}) == [
        (20.1, 0.3), (20.6, 0.7), (30.1, 0.98), (32.0, 0.99)]
    assert main(["report", str(d), "--json"]) == 0
    html = Path(json.loads(capsys.readouterr().out)["html"]).read_text()
    assert f"RTT of every measured call, {case['id']}" in html
    assert "untraced (client histogram) (10 of 1000 beyond" in html
    assert f"{case['dir']}/client-untraced.json rtt_hist" in html
    # The shown range ends where 99.5 % of the calls are, so the slow mode (at 30 us) is in it.
    fig = svgfig.binned_histograms({"u": {"from_us": 20.0, "bin_us": 0.1, "counts": counts, "above": 10}}, "t")
    bars = re.findall(r'<path class="series" d="([^"]+)"', fig)[0]
    assert bars.count("V") >= 4, bars


def test_report_without_analysis_says_how(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(FIX, d)
    assert main(["report", str(d)]) == 0
    o = capsys.readouterr().out
    assert "rpcscope analyze" in o and "index.html" in o
    assert "rpcscope model" in (d / "report" / "report.md").read_text()


def test_report_draws_the_measured_path_of_a_real_call(run):
    """With analysis/rtp.json (`rpcscope rtp`), the Figure-5 diagram is one real call's path at its
    traced times: boxes follow each other down the time axis, the hand-offs are arrows, and the
    client's C9-C11 (after its send, while the server works) are dashed beside the path."""
    assert main(["rtp", str(run), "--quiet"]) == 0
    try:
        assert main(["report", str(run), "--out", str(run / "rep2")]) == 0
        svg = (run / "rep2" / "fig-rtp-udp-maxarg-0.svg").read_text()
        assert "measured: call" in svg and "without the probes" in svg
        boxes = [(float(y), float(h)) for y, h in re.findall(
            r'<g class="step rtp"><title>[^<]*</title><rect x="[0-9.]+" y="([0-9.]+)" width="[0-9.]+" '
            r'height="([0-9.]+)"', svg)]
        assert len(boxes) > 10
        # In time order down the axis, and no box over another of its column (0.15 + 0.14 meets 0.29).
        assert all(b[0] >= a[0] + a[1] - 0.15 for a, b in zip(boxes, boxes[1:]))     # 0.1 px: SVG rounding
        assert 'class="handoff"' in svg and "C9 (slack" in svg
    finally:
        (run / "analysis" / "rtp.json").unlink()


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium not installed (scripts/bootstrap.sh)")
def test_report_renders_in_chromium(run, tmp_path):
    assert main(["report", str(run)]) == 0
    url = (run / "report" / "index.html").resolve().as_uri()
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert r.stdout.count("<svg") >= 5 and "Round trip path" in r.stdout
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,3000",
                    f"--screenshot={shot}", url], capture_output=True, timeout=60)
    assert shot.stat().st_size > 10000


def test_notebook_runs_on_fixture(run, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(Path(__file__).parents[2] / "reports" / "notebooks" / "rpcscope.ipynb", as_version=4)
    monkeypatch.setenv("RPCSCOPE_RUN", str(run))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/svg+xml" in o.get("data", {}) for o in outs)


def test_the_clock_check_table_sets_each_corrected_step_beside_the_clock_build():
    """Per transport, a step's corrected median less its clock-read median (ns) per size, and the
    median of their absolute values; steps without a clock figure (kernel-bounded) are not listed."""

    def row(size, step, corr, clock):
        return {"transport": "udp", "size": size, "step": step, "corrected_median_us": corr,
                "clock_reads_median_us": clock}
    steps = [row(0, "C1", 0.012, 0.03), row(8032, "C1", 0.05, 0.03), row(0, "S4", 0.75, 0.61),
             row(0, "C8", 1.3, None), row(0, "C5", None, 0.02)]
    (t,) = clock_check_tables(steps)
    assert t.columns == ["step", "0", "8032", "median |diff| ns"]
    assert t.rows == [{"step": "C1", "0": "-18", "8032": "+20", "median |diff| ns": "19"},
                      {"step": "S4", "0": "+140", "8032": "", "median |diff| ns": "140"}]
    assert clock_check_tables([row(0, "C8", 1.3, None)]) == []
    # the RTT row: the round-trip path's corrected RTT (rtp.json), not the step table's RTT row
    rtp = {"cases": [{"transport": "udp", "size": 0, "rtt_corrected_median_ns": 18440.0}]}
    (t,) = clock_check_tables([row(0, "RTT", 15.8, 18.94)], rtp)
    assert t.rows == [{"step": "RTT", "0": "-500", "median |diff| ns": "500"}]


def test_the_first_screen_says_what_hosts_it_saw(run, tmp_path):
    """One kernel shared by two namespaces: the first screen's hosts table and clock sentence say so."""
    out = tmp_path / "rep"
    assert main(["report", str(run), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    first = md.split("\n## ")[1]                   # the first section: "Where does the time go?"
    assert first.startswith("Where does the time go?"), first[:80]
    assert "namespace, shared kernel" in first and "LTTng-UST; kernel: " in first, first[:3000]
    assert "Clocks: one kernel clock for both hosts" in first, first[:3000]
