"""The report's page as a reader's browser lays it out (headless Chromium at 1400 px): the first screen's
bars add up to each size's Measured, no table or figure is wider than the window, the page with its
details folded is under 15,000 px at the DCE study's sizes, and no label of any figure leaves its figure
or meets another label.

The run: the committed two-transport fixture (a make run capture, udp and tcp at 0 and 4016 bytes),
analysed, then each transport's cases set at the DCE study's six sizes (each size takes the outputs of
the captured case nearest it: the page's layout depends on how many cases there are, not on their
figures), and a model file per transport fitted by `rpcscope model` on them.
"""
import contextlib
import copy
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rpcscope.cli import main
from rpcscope.reports import first_screen as FS
from rpcscope.reports.data import load
from rpcscope.reports.report import build, write

FIX = Path(__file__).parent / "fixtures" / "run-two-transports"
DCE_SIZES = (0, 1392, 4016, 8032, 16064, 24096)
CHROMIUM = shutil.which("chromium")


def _quiet(argv):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    return rc, out.getvalue()


def _nearest(captured, z):
    return min(captured, key=lambda c: abs(c - z))


def at_dce_sizes(d):
    """Rewrite an analysed run's outputs (manifest.json, analysis/steps.json, rtp.json, probe.json) so
    that each transport has a case at every DCE size, copied from its captured case nearest in size."""
    man = json.loads((d / "manifest.json").read_text())
    steps = json.loads((d / "analysis" / "steps.json").read_text())
    rtp = json.loads((d / "analysis" / "rtp.json").read_text())
    probe = json.loads((d / "analysis" / "probe.json").read_text())
    src = {c["id"]: c for c in man["cases"]}
    new_ids = {}
    for c in man["cases"]:
        captured = sorted(x["size"] for x in man["cases"] if x["transport"] == c["transport"])
        for z in DCE_SIZES:
            if _nearest(captured, z) == c["size"]:
                new_ids[f"{c['transport']}-{c['proc']}-{z}"] = (c["id"], z)

    def clone(rows, key):
        out = []
        for nid, (sid, z) in new_ids.items():
            for r in rows:
                if r.get(key) == sid:
                    out.append({**copy.deepcopy(r), key: nid, "size": z})
        return out
    man["cases"] = clone(list(src.values()), "id")
    man["params"]["sizes"] = list(DCE_SIZES)
    steps["steps"], steps["rtt"] = clone(steps["steps"], "case"), clone(steps["rtt"], "case")
    rtp["cases"] = clone(rtp["cases"], "case")
    for k in ("key", "cases"):
        probe[k] = {nid: copy.deepcopy(probe[k][sid]) for nid, (sid, _) in new_ids.items() if sid in probe[k]}
    (d / "manifest.json").write_text(json.dumps(man))
    (d / "analysis" / "steps.json").write_text(json.dumps(steps))
    (d / "analysis" / "rtp.json").write_text(json.dumps(rtp))
    (d / "analysis" / "probe.json").write_text(json.dumps(probe))
    return sorted(new_ids)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("layout") / "run"
    shutil.copytree(FIX, d)
    assert _quiet(["analyze", str(d), "--quiet"])[0] == 0
    assert _quiet(["rtp", str(d), "--quiet"])[0] == 0
    at_dce_sizes(d)
    for t in ("udp", "tcp"):
        rc, out = _quiet(["model", str(d), "--transport", t, "--holdout", "8032"])
        assert rc == 0, out
    write(build(load(d)), d / "report")
    return d


MEASURE = r"""<script>
function texts(svg) { return Array.from(svg.querySelectorAll('text')).filter(t => t.textContent.trim()); }
function meets(a, b) { return Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                              Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1; }
function inside(a, b) { return a.left >= b.left - 1 && a.right <= b.right + 1 &&
                               a.top >= b.top - 1 && a.bottom <= b.bottom + 1; }
function measure() {
  const r = {width: window.innerWidth, folded: {w: document.documentElement.scrollWidth,
             h: document.documentElement.scrollHeight}, bars: [], wide: [], outside: [], overlaps: [], boxes: 0};
  document.querySelectorAll('svg.bars g.bar').forEach(g => {
    const terms = Array.from(g.querySelectorAll('rect.term'));
    const first = g.querySelector('rect.term').getBoundingClientRect().left;
    const tick = g.querySelector('line.measured').getBoundingClientRect();
    let px = 0;
    terms.forEach(t => { const w = t.getBoundingClientRect().width; px += t.classList.contains('negative') ? -w : w; });
    r.bars.push({case: g.dataset.case, measured: +g.dataset.measuredUs, source: g.dataset.source,
                 terms: terms.map(t => [t.dataset.term, +t.dataset.us]),
                 px_sum: px, px_measured: (tick.left + tick.right) / 2 - first}); });
  document.querySelectorAll('details.sec').forEach(d => d.open = true);
  r.sections = {w: document.documentElement.scrollWidth, h: document.documentElement.scrollHeight};
  document.querySelectorAll('details').forEach(d => d.open = true);
  r.open = {w: document.documentElement.scrollWidth, h: document.documentElement.scrollHeight};
  document.querySelectorAll('body *').forEach(e => {
    const b = e.getBoundingClientRect(); if (b.right > window.innerWidth + 0.5)
      r.wide.push(e.tagName + ' ' + (e.id || (e.querySelector('title') || {}).textContent || '') + ': right ' +
                  Math.round(b.right)); });
  document.querySelectorAll('svg').forEach(svg => {
    const box = svg.getBoundingClientRect(), name = (svg.querySelector('title') || {}).textContent;
    const ts = texts(svg).map(t => [t.textContent, t.getBoundingClientRect()]);
    ts.forEach(([s, b]) => { if (!inside(b, box)) r.outside.push(name + ': ' + s); });
    for (let i = 0; i < ts.length; i++) for (let j = i + 1; j < ts.length; j++)
      if (meets(ts[i][1], ts[j][1])) r.overlaps.push(name + ': "' + ts[i][0] + '" / "' + ts[j][0] + '"');
    svg.querySelectorAll('g.step').forEach(g => { r.boxes++;
      const t = g.querySelector('text'), b = g.querySelector('rect');
      if (!inside(t.getBoundingClientRect(), b.getBoundingClientRect()))
        r.outside.push(name + ': box ' + t.textContent); }); });
  const out = document.createElement('pre'); out.id = 'layout-result'; out.textContent = JSON.stringify(r);
  document.body.appendChild(out); }
window.addEventListener('load', measure);
</script>"""


def lay_out(html_file, tmp_path, width=1400):
    """The page's measures in headless Chromium at a window `width` px wide (see MEASURE)."""
    page = tmp_path / "measured.html"
    page.write_text(html_file.read_text().replace("</body>", MEASURE + "</body>"))
    # beside the report, so that its relative links resolve as the reader's do
    page = page.replace(html_file.parent / "measured.html")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    page.unlink()
    assert '<pre id="layout-result">' in dom, dom[-2000:]
    from html import unescape
    return json.loads(unescape(dom.split('<pre id="layout-result">')[1].split("</pre>")[0]))


@pytest.fixture(scope="module")
def page(run, tmp_path_factory):
    if not CHROMIUM:
        pytest.skip("chromium not installed (scripts/bootstrap.sh)")
    return lay_out(run / "report" / "index.html", tmp_path_factory.mktemp("page"))


def _path_sums(run):
    """{case: (corrected path µs, traced path µs)} straight from rtp.json's typical path."""
    rtp = json.loads((run / "analysis" / "rtp.json").read_text())
    return {c["case"]: (sum(s["typical_corrected_ns"] for s in c["path"]) / 1e3,
                        sum(s["typical_ns"] for s in c["path"]) / 1e3) for c in rtp["cases"]}


def test_the_first_screens_bars_add_up_to_measured(run, page):
    """Each bar, as drawn: its stretches (the terms, then the rest of Measured, negative where the path is
    longer) add up to the model file's Measured of that size within 1 %, in data and in pixels; the
    terms add up to the case's own probe-corrected path in rtp.json."""
    models = {t: {r["size"]: r for r in json.loads((run / "analysis" / f"model-{t}.json").read_text())["rows"]}
              for t in ("udp", "tcp")}
    paths = _path_sums(run)
    assert sorted(b["case"] for b in page["bars"]) == sorted(paths)
    signs = set()
    for b in page["bars"]:
        t, _, z = b["case"].split("-")
        assert b["measured"] == pytest.approx(models[t][int(z)]["measured_us"], rel=1e-9), b
        assert b["source"] == f"analysis/model-{t}.json rows[size={z}].measured_us"
        terms = dict(b["terms"])
        assert list(terms) == [*FS.TERMS, FS.REST]
        assert sum(terms.values()) == pytest.approx(b["measured"], rel=0.01), b
        assert sum(terms[k] for k in FS.TERMS) == pytest.approx(paths[b["case"]][0], rel=1e-6), b
        assert b["px_sum"] == pytest.approx(b["px_measured"], rel=0.01, abs=0.5), b
        signs.add(terms[FS.REST] > 0)
    assert signs == {True, False}       # the fixture has a path longer than Measured, and one shorter


def test_the_page_fits_a_1400_px_window_and_is_short_folded(page):
    """At 1400 px nothing is wider than the window, folded or with every <details> open; at the DCE sizes
    the page is under 15,000 px folded, and still is with every section open (each case's table and
    figure folded in it)."""
    assert page["width"] == 1400
    assert page["folded"]["w"] <= 1400 and page["sections"]["w"] <= 1400 and page["open"]["w"] <= 1400, page["wide"]
    assert page["wide"] == []
    assert page["folded"]["h"] <= 15000, page["folded"]
    assert page["sections"]["h"] <= 15000, page["sections"]
    assert page["open"]["h"] > page["folded"]["h"]


def test_no_label_leaves_its_figure_or_meets_another(page):
    """Every text of every figure lies inside its figure, meets no other text of it, and each step
    label of a path diagram lies inside its box."""
    assert page["boxes"] > 100
    assert page["outside"] == []
    assert page["overlaps"] == []


def test_the_bars_draw_the_probe_effect_beside_measured_not_in_it(run):
    """The hatched stretch is traced − corrected of the case's path, drawn after the bar, and is not one of
    the stretches that add up to Measured."""
    svg = (run / "report" / "fig-bars-udp.svg").read_text()
    paths = _path_sums(run)
    for g in svg.split('<g class="bar"')[1:]:
        case = g.split('data-case="')[1].split('"')[0]
        probe = float(g.split('<rect class="probe" data-us="')[1].split('"')[0])
        assert probe == pytest.approx(paths[case][1] - paths[case][0], rel=1e-6)
        assert 'class="term" data-term="probe' not in g


def test_without_a_model_file_measured_is_the_manifests_untraced_p50(run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(run, d, ignore=shutil.ignore_patterns("cache", "report"))
    for f in (d / "analysis").glob("model-*.json"):
        f.unlink()
    man = {c["id"]: c for c in json.loads((d / "manifest.json").read_text())["cases"]}
    views = FS.views(load(d))
    assert [v.transport for v in views] == ["udp", "tcp"] and all(v.model_file == "" for v in views)
    for b in (b for v in views for b in v.bars):
        assert b.measured_us == man[b.case]["untraced"]["p50"] / 1e3
        assert b.measured_source == f"manifest.json cases[id={b.case}].untraced.p50"
        assert b.rest_us + b.path_us == pytest.approx(b.measured_us)


def _bar(size, client, server, wake, measured=None):
    terms = {"client CPU": client, "server CPU": server, "wake-ups": wake, "network": 0.0}
    path = sum(terms.values())
    return FS.Bar(f"udp-x-{size}", "udp", size, measured or path, "", terms, path, path + 10)


def test_the_sentence_names_the_largest_term_and_its_growth_from_the_data():
    v = FS.TransportView("udp", [_bar(0, 10, 12, 40), _bar(1000, 30, 20, 41), _bar(2000, 50, 28, 42)], [], "")
    assert FS.sentence(v) == (
        "UDP: client CPU is the largest term at 2000 bytes (wake-ups at 0 bytes); it goes from 10.00 µs at 0 "
        "bytes to 50.00 µs at 2000 bytes (42 % of Measured there), +20.00 µs per 1000 bytes (least-squares "
        "slopes over the sizes with a path).")
    v = FS.TransportView("tcp", [_bar(0, 10, 12, 40), _bar(1000, 11, 20, 41)], [], "")
    assert FS.sentence(v) == (
        "TCP: wake-ups are the largest term at every size; they go from 40.00 µs at 0 bytes to 41.00 µs at 1000 "
        "bytes (57 % of Measured there), +1.00 µs per 1000 bytes; server CPU grows fastest, +8.00 µs per 1000 "
        "bytes (least-squares slopes over the sizes with a path).")


def test_each_segment_goes_to_its_side_and_unit():
    path = [{"segment": s, "typical_corrected_ns": 1000.0 * (i + 1), "typical_ns": 1000.0 * (i + 2)}
            for i, s in enumerate(["C1", "C8''", "S2", "preempted", "server (no step)", "network", "C16",
                                   "client blocked (no waking)"])]
    terms, traced, unsided = FS.split_path(path)
    assert terms == {"client CPU": 1 + 2, "server CPU": 4 + 5, "wake-ups": 3 + 7 + 8, "network": 6.0}
    assert traced == sum(range(2, 10)) and unsided == ["preempted"]


def test_every_section_starts_with_a_sentence_and_names_no_internal_path(run):
    """Each section opens with a paragraph; the page names no run directory, temporary or work path,
    environment variable or source file."""
    rep = build(load(run))
    assert all(isinstance(s.items[0], str) and len(s.items[0]) > 40 for s in rep.sections)
    html = (run / "report" / "index.html").read_text()
    for word in ("RPCSCOPE_", "/tmp/", "/work/", "runs/", str(run), ".py", "steps.toml"):
        assert word not in html, word


def test_the_notebook_draws_the_first_screens_bars_from_the_same_outputs(run, monkeypatch):
    """reports/notebooks/rpcscope.ipynb, executed on the run: one matplotlib figure per transport, and
    the bars it drew are the report's, case by case (Measured, the stretches' sum, the probe effect)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(Path(__file__).parents[2] / "reports" / "notebooks" / "rpcscope.ipynb", as_version=4)
    monkeypatch.setenv("RPCSCOPE_RUN", str(run))
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outs) == 2
    (line,) = [ln for o in outs if o.get("name") == "stdout" for ln in o["text"].splitlines()
               if ln.startswith("first-screen bars: ")]
    drawn = json.loads(line.split(": ", 1)[1])
    svg = "".join((run / "report" / f"fig-bars-{t}.svg").read_text() for t in ("udp", "tcp"))
    bars = {g.split('data-case="')[1].split('"')[0]: g for g in svg.split('<g class="bar"')[1:]}
    assert sorted(drawn) == sorted(bars)
    for case, b in drawn.items():
        g = bars[case]
        assert b["measured_us"] == float(g.split('data-measured-us="')[1].split('"')[0])
        assert b["drawn_us"] == pytest.approx(b["measured_us"], rel=1e-9)
        assert b["probe_us"] == pytest.approx(float(g.split('data-probe-us="')[1].split('"')[0]), rel=1e-9)


def test_the_first_screens_figures_are_printed_as_the_model_table_prints_them(run):
    """Measured and the model's % error of a size read the same on the first screen as in the model's
    table (one rounding), and the bars' figures are those of the first screen's table."""
    rep = build(load(run))
    tables = {t.title: t for t in rep.tables()}
    for t in ("UDP", "TCP"):
        first = {r["size"]: r for r in tables[f"Where the time goes, {t} (µs; model and baselines in % error)"].rows}
        model = {r["size"]: r for r in tables[f"Calculated vs measured RTT, {t}"].rows}
        assert sorted(first) == sorted(model) == list(DCE_SIZES)
        for z, r in first.items():
            assert r["Measured µs"] == model[z]["measured_us"]
            assert float(r["model %"]) == float(model[z]["model_%"])
        svg = (run / "report" / f"fig-bars-{t.lower()}.svg").read_text()
        assert all(f">{r['Measured µs']}</text>" in svg for r in first.values())
