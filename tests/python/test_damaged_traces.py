"""Damaged traces and run directories through the real `rpcscope analyze` (a subprocess, as a user runs it):
every case ends with exit status 0 (analysed, the problem named) or 2 (one line saying what is wrong),
never a traceback; the message names the damaged file; the intact streams are still analysed.

Each case copies the committed fixture run (tests/python/fixtures/run-udp-small: two UDP cases, perf
kernel traces) into a temporary directory and damages it. The run is given by a relative path (the
documented form, from the temporary directory) and, for the trace damages, by its absolute path too.
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
from helpers import RPCSCOPE

HERE = pathlib.Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "run-udp-small"
DAMAGED, INTACT = "udp-maxarg-0", "udp-maxarg-8032"

pytestmark = pytest.mark.skipif(not shutil.which("babeltrace2"), reason="needs babeltrace2 (make bootstrap)")


def _ust(run, case=DAMAGED):
    return next((run / "cases" / case / "ust").rglob("metadata")).parent


def _kernel(run, case=DAMAGED):
    return run / "cases" / case / "kernel" / "trace"


def _replace(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _manifest(run, change):
    mf = run / "manifest.json"
    m = json.loads(mf.read_text())
    mf.write_text(json.dumps(change(m)))


def _case(m, **kw):
    m["cases"][0].update(kw)
    return m


def _cut_packet(f, keep=5000):
    """The stream's whole packet, then the first `keep` bytes of another: a tracer stopped mid-packet."""
    data = f.read_bytes()
    f.write_bytes(data + data[:keep])


# name: (damage(run) -> the file the message must name, exit status, words the output must hold,
#        {case: RPCs expected (None: any number, "some": more than 0)}, {case: step whose RPCs must be > 0})
TRACE_CASES = {
    "truncated stream (cut inside its last packet)": (
        lambda r: (_cut_packet(_ust(r) / "rpcs_ust_0"), _ust(r) / "rpcs_ust_0")[1], 0,
        ["cut short", "events kept"], {DAMAGED: 20, INTACT: 20}, {}),
    "truncated stream (cut inside its only packet)": (
        lambda r: (os.truncate(_ust(r) / "rpcs_ust_0", 20000), _ust(r) / "rpcs_ust_0")[1], 0,
        ["cut short", "declares 33576 bytes"], {DAMAGED: 0, INTACT: 20}, {}),
    "truncated kernel stream": (
        lambda r: (os.truncate(_kernel(r) / "perf_stream_1", 30000), _kernel(r) / "perf_stream_1")[1], 0,
        ["cut short"], {DAMAGED: 20, INTACT: 20}, {DAMAGED: "C8'"}),
    "garbage metadata": (
        lambda r: (_replace(_ust(r) / "metadata", "stream {", "stream { garbage ((;"), _ust(r) / "metadata")[1], 0,
        ["invalid CTF metadata", "line 42", "restore the metadata file"], {DAMAGED: 0, INTACT: 20}, {}),
    "garbage in a clock block": (
        lambda r: (_replace(_ust(r) / "metadata", "precision = 0;", "precision = 0 garbage;"),
                   _ust(r) / "metadata")[1], 0,
        ["invalid CTF metadata", "syntax error"], {DAMAGED: 0, INTACT: 20}, {}),
    "size = 6 4": (
        lambda r: (_replace(_ust(r) / "metadata", "size = 64; align = 8; } stream_id",
                            "size = 6 4; align = 8; } stream_id"), _ust(r) / "metadata")[1], 0,
        ["invalid CTF metadata", 'token="4"'], {DAMAGED: 0, INTACT: 20}, {}),
    "empty metadata": (
        lambda r: ((_ust(r) / "metadata").write_text(""), _ust(r) / "metadata")[1], 0,
        ["invalid CTF metadata: the file is empty"], {DAMAGED: 0, INTACT: 20}, {}),
    "missing host directory": (
        lambda r: (shutil.rmtree(r / "cases" / DAMAGED / "ust" / "vm"), r / "cases" / DAMAGED / "ust")[1], 0,
        ["no CTF trace under it", "host directory"], {DAMAGED: 0, INTACT: 20}, {}),
    "missing ust/": (
        lambda r: (shutil.rmtree(r / "cases" / DAMAGED / "ust"), r / "cases" / DAMAGED / "ust")[1], 0,
        ["the user trace is missing"], {DAMAGED: 0, INTACT: 20}, {}),
    "missing kernel trace": (
        lambda r: (shutil.rmtree(r / "cases" / DAMAGED / "kernel"), r / "cases" / DAMAGED / "kernel")[1], 0,
        ["the kernel trace is missing", "--no-kernel"], {DAMAGED: 20, INTACT: 20}, {}),
    "missing case directory": (
        lambda r: (shutil.rmtree(r / "cases" / DAMAGED), r / "cases" / DAMAGED)[1], 0,
        ["the case's directory is missing"], {DAMAGED: 0, INTACT: 20}, {}),
    "lost events": (
        lambda r: (_manifest(r, lambda m: _case(m, lossy=True)), r / "manifest.json")[1], 0,
        ["lost events"], {DAMAGED: 20, INTACT: 20}, {}),
}

# name: (damage(run), the manifest's words the one-line error must hold)
MANIFEST_CASES = {
    "[]": (lambda r: (r / "manifest.json").write_text("[]"), "the manifest is []"),
    "null": (lambda r: (r / "manifest.json").write_text("null"), "the manifest is null"),
    '"cases": "x"': (lambda r: _manifest(r, lambda m: dict(m, cases="x")), '"cases" is "x"'),
    '"size": "big"': (lambda r: _manifest(r, lambda m: _case(m, size="big")), 'cases[0].size is "big"'),
    "a case that is null": (lambda r: _manifest(r, lambda m: dict(m, cases=[None])), "cases[0] is null"),
    "a case without id": (lambda r: _manifest(r, lambda m: dict(m, cases=[{"size": 0}])), 'cases[0] has no "id"'),
    '"hosts": [1]': (lambda r: _manifest(r, lambda m: dict(m, hosts=[1])), '"hosts" is [1]'),
    '"untraced": "x"': (lambda r: _manifest(r, lambda m: _case(m, untraced="x")), 'cases[0].untraced is "x"'),
    "cut short": (lambda r: (r / "manifest.json").write_text((r / "manifest.json").read_text()[:500]),
                  "unreadable manifest"),
    "interrupted, no case finished": (
        lambda r: _manifest(r, lambda m: dict(m, interrupted=True, complete=False,
                                              cases=[dict(c, complete=False) for c in m["cases"]])),
        "none of its 2 cases was finished"),
    "interrupted before its first case": (
        lambda r: _manifest(r, lambda m: dict(m, interrupted=True, complete=False, cases=[])),
        "interrupted before its first case"),
}


def _analyze(run, cwd):
    return subprocess.run(RPCSCOPE + ["analyze", str(run), "--quiet"], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _copy(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


# The absolute form on the stream, metadata and directory damages.
ABSOLUTE = ("truncated stream (cut inside its last packet)", "truncated kernel stream", "garbage metadata",
            "missing host directory")


@pytest.mark.parametrize("name,form", [(n, "relative") for n in TRACE_CASES] + [(n, "absolute") for n in ABSOLUTE])
def test_a_damaged_trace_is_named_and_the_intact_streams_analysed(tmp_path, name, form):
    damage, status, words, rpcs, steps = TRACE_CASES[name]
    run = _copy(tmp_path)
    bad = damage(run)
    arg = run.relative_to(tmp_path) if form == "relative" else run
    p = _analyze(arg, tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == status, out
    assert "Traceback" not in out, out
    # The message names the file, in the form the run was given.
    named = bad.relative_to(tmp_path) if form == "relative" else bad
    problems = [ln for ln in p.stdout.splitlines() if ln.startswith(f"  {DAMAGED}")]
    assert any(str(named) in ln for ln in problems), out
    for w in words:
        assert any(w in ln for ln in problems), (w, out)
    assert "trace problems (" in p.stdout
    res = json.loads((run / "analysis" / "steps.json").read_text())
    got = {d["case"]: d["rpcs"] for d in res["rtt"]}
    for case, n in rpcs.items():
        assert got[case] == n, (case, got, out)
    for case, step in steps.items():
        assert next(d["n"] for d in res["steps"] if d["case"] == case and d["step"] == step) > 0, step
    # Recorded in the analysis output too.
    assert any(str(named) == t["file"] for t in res["trace_problems"]), res["trace_problems"]


def test_the_intact_fixture_has_no_trace_problem(tmp_path):
    run = _copy(tmp_path)
    p = _analyze(run.relative_to(tmp_path), tmp_path)
    assert p.returncode == 0 and "trace problems" not in p.stdout and "PARTIAL" not in p.stdout, p.stdout + p.stderr
    res = json.loads((run / "analysis" / "steps.json").read_text())
    assert {d["case"]: d["rpcs"] for d in res["rtt"]} == {DAMAGED: 20, INTACT: 20}
    assert res["trace_problems"] == [] and not res["partial"]


@pytest.mark.parametrize("name", list(MANIFEST_CASES))
def test_a_wrong_manifest_or_an_unfinished_capture_is_one_line_exit_2(tmp_path, name):
    damage, words = MANIFEST_CASES[name]
    run = _copy(tmp_path)
    damage(run)
    p = _analyze(run.relative_to(tmp_path), tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rpcscope analyze: run"), p.stderr
    assert words in lines[0], lines[0]
    assert "run/manifest.json" in lines[0] or lines[0].startswith("rpcscope analyze: run:"), lines[0]
    assert "--replace" in lines[0] or "unreadable manifest" in lines[0], lines[0]


def test_a_partly_interrupted_capture_is_analysed_and_marked_partial(tmp_path):
    run = _copy(tmp_path)
    _manifest(run, lambda m: dict(m, interrupted=True, complete=False,
                                  cases=[m["cases"][0], dict(m["cases"][1], complete=False)]))
    p = _analyze(run.relative_to(tmp_path), tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert p.stdout.startswith("PARTIAL ANALYSIS: the capture was interrupted; 1 case(s) left out (udp-maxarg-8032)")
    assert f"{INTACT}: run/manifest.json: the capture did not finish this case" in p.stdout, p.stdout
    res = json.loads((run / "analysis" / "steps.json").read_text())
    assert res["partial"] and res["interrupted"] and [d["rpcs"] for d in res["rtt"]] == [20]


# Metadata edits of the fixture's user trace: (text, its replacement). rpcscope's own CTF reader (ctfread,
# build/analysis/ctfcols) must refuse every edit babeltrace2 refuses, and read those it reads.
METADATA_EDITS = [
    ("precision = 0;", "precision = 0 garbage;"), ("precision = 0;", "precision = 0; foo = bar baz;"),
    ("precision = 0;", "precision = zero;"), ("precision = 0;", "precision = 0; foo = 1;"),
    ("freq = 1000000000;", "freq = 1000000000 1;"), ("offset_s = 1795301139;", "offset_s = 17953 01139;"),
    ("offset_s = 1795301139;", "offset_s = abc;"), ("offset = 38335701;", "offset = 38335701x;"),
    ("absolute = true;", "absolute = maybe;"), ('uuid = "6edd73ef', 'uuid = "zzdd73ef'),
    ("name = monotonic;", "name = mono tonic;"),
    ("size = 64; align = 8; } stream_id", "size = 6 4; align = 8; } stream_id"),
    ("size = 64; align = 8; } stream_id", "size = 64; align = 8 8; } stream_id"),
    ("size = 64; align = 8; } stream_id", "size = 64; align = 8; signed = perhaps; } stream_id"),
    ("size = 64; align = 8; } stream_id", "size = 64; align = 8; base = q; } stream_id"),
    ("size = 64; align = 8; } stream_id", "size = 64; align = 8; encoding = EBCDIC; } stream_id"),
    ("size = 64; align = 8; } stream_id", "size = 64; align = 8; foo = 3; } stream_id"),
    ('domain = "ust";', 'domain = "ust" "x";'), ("major = 1;", "major = 2;"), ("minor = 8;", "minor = 9;"),
    ("id = 0;\n\tpacket.context", "id = 0 0;\n\tpacket.context"), ("env {", "env { x = 1 2;"),
    ("env {", "env { x = a.b;"), ("trace {", "trace { foo = 1;"),
]


@pytest.mark.skipif(not (HERE.parents[1] / "build" / "analysis" / "ctfcols").is_file(),
                    reason="needs the native extractor (make analysis)")
def test_ctfread_refuses_the_metadata_babeltrace2_refuses(tmp_path):
    ctfcols = HERE.parents[1] / "build" / "analysis" / "ctfcols"
    src = _ust(FIXTURE)
    disagree = []
    for k, (old, new) in enumerate(METADATA_EDITS):
        d = tmp_path / f"t{k}"
        shutil.copytree(src, d)
        _replace(d / "metadata", old, new)
        bt = subprocess.run(["babeltrace2", str(d)], capture_output=True, timeout=60).returncode
        out = tmp_path / f"o{k}"
        out.mkdir()
        subprocess.run([str(ctfcols), str(out), str(d)], capture_output=True, timeout=60)
        meta = json.loads((out / "meta.json").read_text())
        if (bt == 0) != (meta["reader"] == "ctfread"):
            disagree.append((new, bt, meta["reader"], meta.get("ctfread_refused")))
        elif bt != 0:
            assert meta["ctfread_refused"] and "metadata" in meta["ctfread_refused"] or \
                "unsupported" in meta["ctfread_refused"], meta
    assert not disagree, disagree
