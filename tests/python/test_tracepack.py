"""Packed traces (analysis/tracepack.py), as `rpcscope run` leaves a run directory: every case's trace
directories packed into archives a fraction of their size, unpacked byte for byte where the analysis
reads them, with the same figures as from the raw traces; a damaged archive is named, not half-read."""
import hashlib
import json
import pathlib
import shutil
import subprocess

import pytest
from helpers import RPCSCOPE

from rpcscope.analysis import tracepack
from rpcscope.pipeline import lean

RUN = pathlib.Path(__file__).parent / "fixtures" / "run-e2e"

pytestmark = pytest.mark.skipif(not shutil.which("zstd"), reason="needs zstd (make bootstrap installs it)")


def _files(d):
    """{relative path: sha256} of every file under the run's cases."""
    return {str(f.relative_to(d)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted((d / "cases").rglob("*")) if f.is_file()}


def _analyze(d):
    p = subprocess.run(RPCSCOPE + ["analyze", str(d), "--json", "--quiet"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def test_a_lean_run_reads_as_the_raw_one_and_unpacks_byte_for_byte(tmp_path):
    """pipeline.lean, as `rpcscope run` ends: the cache goes, every trace is packed; the next analysis
    unpacks the cases it reads and finds the same figures."""
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    before = _files(d)
    raw_dirs = tracepack.trace_dirs(d)
    assert len(raw_dirs) == 2 * len(list((d / "cases").iterdir()))         # ust and kernel per case
    first = _analyze(d)
    cache = d / "analysis" / "cache"
    assert cache.is_dir()
    size = tracepack.disk_bytes(d)

    done = lean(d)
    assert not cache.exists() and not tracepack.trace_dirs(d)
    assert done["traces_packed"] == len(raw_dirs) and done["cache_removed_bytes"] > 0
    assert tracepack.archives(d) == [tracepack.archive_of(x) for x in raw_dirs]
    assert 0 < done["traces_packed_bytes"] < done["traces_raw_bytes"] / 3, done
    assert tracepack.disk_bytes(d) < size - done["cache_removed_bytes"] - done["traces_raw_bytes"] / 2
    assert not list(d.rglob(".tracepack-*"))

    again = _analyze(d)                     # the analysis unpacks each case where it reads it
    assert again == first
    assert not tracepack.archives(d) and _files(d) == before


def test_a_damaged_archive_is_named_and_left_as_it_was(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    tracepack.pack(d)
    arc = tracepack.archives(d)[0]
    arc.write_bytes(arc.read_bytes()[:200])
    trace_dir = arc.with_name(arc.name[:-len(tracepack.SUFFIX)])
    with pytest.raises(tracepack.PackError) as e:
        tracepack.unpack(trace_dir)
    assert str(arc) in str(e.value) and "\n" not in str(e.value)
    assert arc.exists() and not trace_dir.exists() and not list(arc.parent.glob(".tracepack-*"))
    other = tracepack.archives(d)[1]
    assert tracepack.unpack(other.with_name(other.name[:-len(tracepack.SUFFIX)]))   # the others still unpack


def test_unpack_leaves_a_present_directory_alone(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    t = tracepack.trace_dirs(d)[0]
    assert tracepack.unpack(t) is False and t.is_dir()
    assert tracepack.pack(tmp_path / "nothing-here").traces == 0
