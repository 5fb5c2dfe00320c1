"""The native extractor: build/analysis/ctfcols (analysis/ctfcols.c, C over
libbabeltrace2, built by `make analysis`), about 25 times faster than decoding
through bt2's Python bindings. It writes the columns of traceread.COLUMNS as
raw arrays plus meta.json; traceread memory-maps them."""
import json
import pathlib
import subprocess

from rpcscope import ROOT

EXTRACTOR = ROOT / "build" / "analysis" / "ctfcols"


def available():
    return EXTRACTOR.is_file()


def extract(trace_dirs, out_dir):
    """Run the extractor; return its meta.json (with "error" set when decoding
    stopped early: the columns then hold the events before the error)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([str(EXTRACTOR), str(out_dir), *map(str, trace_dirs)], capture_output=True, text=True)
    meta_path = out_dir / "meta.json"
    if r.returncode not in (0, 1) or not meta_path.exists():
        return {"error": f"ctfcols exited with status {r.returncode}: {r.stderr.strip()[:300]}"}
    return json.loads(meta_path.read_text())
