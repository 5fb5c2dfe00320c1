"""The report of a run with both transports: every figure and table of a case is drawn from that case's
own entries in the analysis outputs (keyed by case id), never from another case of the same size."""
import contextlib
import io
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from rpcscope.cli import main
from rpcscope.reports.data import load
from rpcscope.reports.report import _f, build

FIX = Path(__file__).parent / "fixtures" / "run-two-transports"
SVG = "{http://www.w3.org/2000/svg}"


def _quiet(argv):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cases") / "run"
    shutil.copytree(FIX, d)
    assert _quiet(["analyze", str(d), "--quiet"])[0] == 0
    assert _quiet(["rtp", str(d), "--quiet"])[0] == 0
    rc, out = _quiet(["report", str(d), "--json"])
    assert rc == 0, out
    return d


def _rtp(run):
    return {c["case"]: c for c in json.loads((run / "analysis" / "rtp.json").read_text())["cases"]}


def _path_steps(example):
    return {g["step"] for g in example["segments"] if g.get("step")}


def test_the_fixture_tells_the_transports_apart(run):
    """Both transports at each size, with different example calls and, at 4016 bytes, different steps on
    the path (UDP's second window is acknowledged: C22, S15): a figure of the wrong transport shows."""
    rtp = _rtp(run)
    sizes = {}
    for c in rtp.values():
        sizes.setdefault(c["size"], {})[c["transport"]] = c
    assert sizes and all(set(v) == {"udp", "tcp"} for v in sizes.values())
    for z, by in sizes.items():
        assert by["udp"]["example_rpc"]["call_id"] != by["tcp"]["example_rpc"]["call_id"]
    big = sizes[max(sizes)]
    assert "C22" in _path_steps(big["udp"]["example_rpc"]) and "C22" not in _path_steps(big["tcp"]["example_rpc"])


def test_each_path_figure_draws_its_own_cases_call_and_steps(run):
    """fig-rtp-CASE.svg, and the same figure inline in index.html, name the case and the call of
    rtp.json's cases[case=CASE].example_rpc, and its boxes on the path are that call's steps."""
    rtp = _rtp(run)
    html = (run / "report" / "index.html").read_text()
    for cid, c in rtp.items():
        ex = c["example_rpc"]
        root = ET.parse(run / "report" / f"fig-rtp-{cid}.svg").getroot()
        assert (root.get("data-case"), root.get("data-call-id")) == (cid, str(ex["call_id"])), cid
        on_path = {g.get("data-step") for g in root.iter(f"{SVG}g")
                   if g.get("class") == "step rtp" and g.get("data-step")}
        assert on_path == _path_steps(ex), cid
        texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
        assert f"call {ex['call_id']}," in texts
        fig = html[html.index(f'<figure id="rtp-{cid}">'):]
        fig = fig[:fig.index("</figure>")]
        assert f'data-case="{cid}"' in fig and f'data-call-id="{ex["call_id"]}"' in fig
        assert f"cases[case={cid}].example_rpc" in fig


def test_each_table_row_is_its_own_cases(run):
    """The per-step table of a case holds that case's steps.json rows; the traced-vs-untraced table of
    a transport holds, per size, that transport's case (steps.json rtt[], rtp.json cases[])."""
    steps = json.loads((run / "analysis" / "steps.json").read_text())
    rtp = _rtp(run)
    rep = build(load(run))
    tables = {t.title: t for t in rep.tables()}
    for cid in rtp:
        mine = [r for r in steps["steps"] if r["case"] == cid]
        t = tables[f"Case {cid}"]
        assert [(r["step"], r["median_us"]) for r in t.rows] == [(r["step"], _f(r["median_us"])) for r in mine]
    for r in steps["rtt"]:
        t = tables[f"Traced vs untraced, {r['transport']} {r['proc']}"]
        (row,) = [x for x in t.rows if str(x["size"]) == str(r["size"])]
        assert row["traced_p50_us"] == _f(r["traced_rtt_median_us"])
        assert row["untraced_p50_us"] == _f(r["untraced_p50_us"])
        assert row["corrected_p50_us"] == _f(rtp[r["case"]]["rtt_corrected_median_ns"] / 1000)
    figs = [f for f in rep.figures() if f.name.startswith("rtp-")]
    assert sorted(f.case for f in figs) == sorted(rtp) and all(f.name == f"rtp-{f.case}" for f in figs)


def test_each_path_figure_links_its_call_exported_as_a_perfetto_trace(run):
    """Under each diagram, a link to report/calls/CASE-call-N.perfetto-trace: that very call (its call id
    on every slice)."""
    rtp = _rtp(run)
    html = (run / "report" / "index.html").read_text()
    md = (run / "report" / "report.md").read_text()
    for cid, c in rtp.items():
        fig = html[html.index(f'<figure id="rtp-{cid}">'):]
        fig = fig[:fig.index("</figure>")]
        href = fig.split('<a class="call" href="')[1].split('"')[0]
        assert href.startswith(f"calls/{cid}-call-") and f"]({href})" in md
        trace = Trace()
        trace.ParseFromString((run / "report" / href).read_bytes())
        ids = {a.uint_value for p in trace.packet if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN
               for a in p.track_event.debug_annotations if a.name == "call_id"}
        assert ids == {c["example_rpc"]["call_id"]}


MY_SECTIONS = ("per-step-costs", "round-trip-path-figure-5-style", "rtt-vs-request-size", "latency-distributions")


def test_its_sections_name_no_internal_path_and_state_the_sign_of_their_percentages(run):
    html = (run / "report" / "index.html").read_text()
    for sid in MY_SECTIONS:
        sec = html[html.index(f'<h2 id="{sid}">'):]
        sec = sec[:sec.find("<h2", 4) if "<h2" in sec[4:] else len(sec)]
        for word in ("RPCSCOPE_", "session ", "/tmp/", "shared/", "/work/", str(run)):
            assert word not in sec, (sid, word)
    assert "(corrected − untraced) × 100 / untraced" in html


MEASURE = """<script>
window.onload = () => { const out = [];
  document.querySelectorAll('g.step').forEach(g => { const r = g.querySelector('rect').getBBox();
    const t = g.querySelector('text').getBBox();
    if (t.x < r.x - 0.5 || t.x + t.width > r.x + r.width + 0.5 ||
        t.y < r.y - 0.5 || t.y + t.height > r.y + r.height + 0.5)
      out.push(g.querySelector('text').textContent + ': ' + Math.round(t.width) + ' px in ' + Math.round(r.width)); });
  document.body.setAttribute('data-boxes', document.querySelectorAll('g.step').length);
  document.body.setAttribute('data-outside', out.join(' | ')); };
</script>"""


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium not installed (scripts/bootstrap.sh)")
def test_every_path_figures_labels_stay_in_their_boxes_in_chromium(run, tmp_path):
    """Each box label of each path diagram, as headless Chromium lays it out (text and box bounds), lies
    inside its box: long step names ("S15 build window acknowledgement") shrink, then are cut."""
    for cid in _rtp(run):
        page = tmp_path / f"{cid}.html"
        page.write_text("<!DOCTYPE html><html><body>" + (run / "report" / f"fig-rtp-{cid}.svg").read_text()
                        + MEASURE + "</body></html>")
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=2000",
                              "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
        assert 'data-boxes="' in dom, dom[-2000:]
        assert int(dom.split('data-boxes="')[1].split('"')[0]) > 20
        assert dom.split('data-outside="')[1].split('"')[0] == "", cid
