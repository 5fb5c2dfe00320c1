"""The native extractor: build/analysis/ctfcols (analysis/ctfcols.c, built by
`make analysis`). It decodes with rpcscope's own CTF reader (analysis/ctfread.c,
2-5 times faster than libbabeltrace2 on the traces the collectors write) and,
for a trace that reader refuses (outside the CTF subset it reads, or damaged),
with libbabeltrace2; meta.json names the reader and the refusal. Either way it
is about 25 times faster than decoding through bt2's Python bindings. It writes
the columns of traceread.COLUMNS as raw arrays plus meta.json; traceread
memory-maps them. RPCSCOPE_CTFREAD=0 in the environment forces libbabeltrace2."""
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
    r = subprocess.run([str(EXTRACTOR), str(out_dir), *map(str, trace_dirs)], capture_output=True, text=True,
                       errors="replace")   # a damaged trace can put any bytes in a message
    meta_path = out_dir / "meta.json"
    if r.returncode not in (0, 1) or not meta_path.exists():
        return {"error": f"ctfcols exited with status {r.returncode}: {r.stderr.strip()[:300]}"}
    return json.loads(meta_path.read_text())
