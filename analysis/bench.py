"""`rpcscope bench analysis runs/NAME`: the analysis's throughput and memory.

Each measurement runs in a fresh Python process, so its peak RSS is its own; the native
extractor's own peak RSS (VmHWM, as it reports it) is shown beside it wherever it decoded. The
run's own cache and outputs are left alone: the measurements decode into a temporary cache and
write their tables there.

  decode        every trace of the run (each case's user and kernel traces, the in-situ
                calibration's) read into an empty cache as `analyze` reads them (Run.prefetch:
                one extractor per CPU at a time): the first read, end to end
  decode cached the same, from the cache just made (memory-mapped columns)
  analyze       `rpcscope analyze` end to end on an empty cache: decoding, the in-situ probe
                calibration, the reconstruction of every RPC, the tables; the cases spread over
                one forked worker per CPU (steps.analyze, workers.py)
  analyze one   the same in one process (workers=1), beside it
  analyze cached the same with the decoded columns (and probe.json) cached, with workers and in one
                process
  analyze whole the same in one process with each case rebuilt in one window (the whole trace at
                once), beside the default windows of calls: what the windows save
  trace         the run's smallest and largest single trace decoded alone: does memory grow
                with the trace's length?
  babeltrace2   the anchor, measured beside the others in the same run: babeltrace2's own
                command line reading every trace of the run to its dummy sink, one process per
                CPU at a time as `decode` runs its extractors. On this VM the host's speed drifts
                by up to half between minutes (a fixed C loop took 10.4 to 15.5 ms per chunk over
                18 s), so the ratio of a measurement to the anchor is the figure that carries from
                one run of the benchmark to the next; the goal of 1 M events/s is 0.4 of the anchor
                where it passes ~2.5 M.

Events/s = the run's events, each counted once / wall time (`reads` also counts re-reads).
For analyze, the per-RPC tables' own size and the peak beyond them and the interpreter are shown:
the goal is that the latter does not grow with the length of a case.
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from rpcscope.output import UserError, emit_json, table

from . import native, rpcs, traceread
from .run import RunError, load_run
from .steps import analyze

EPILOG = """examples:
  rpcscope bench analysis runs/maxarg-udp                 throughput and peak memory of reading and analysing a run
  rpcscope bench analysis runs/maxarg-udp --no-analyze    decoding only (quicker)
  rpcscope bench analysis runs/maxarg-udp --json

Goal: >= 1 M events/s end to end on the first run, and peak memory that does not
grow with the trace's length beyond the tables. Reference points on the project's 2-vCPU VM:
babeltrace2's native reader ~2.5 M events/s; Python bt2 with field access 50-130 k events/s.
"""


# The goal (1 M events/s) over the anchor it is set beside (babeltrace2's reader, ~2.5 M).
GOAL_OF_ANCHOR = 0.4


def _dir_bytes(p):
    return sum(f.stat().st_size for f in pathlib.Path(p).rglob("*") if f.is_file())


# ---------------------------------------------------------------- child side
def _child(mode, run_path, cache, target=None):
    t0 = time.perf_counter()
    if mode == "decode":
        run = load_run(run_path)
        run.cache_dir = pathlib.Path(cache)
        run.prefetch()
        run.finish_prefetch()
    elif mode == "trace":
        traceread.read_trace(target, cache_dir=cache)
    elif mode in ("analyze", "analyze-one", "analyze-whole"):
        if mode == "analyze-whole":
            rpcs.WINDOW_EVENTS = 1 << 62            # one window per case: the whole trace at once
        run = load_run(run_path)
        run.cache_dir = pathlib.Path(cache)
        run.out_dir = pathlib.Path(cache) / "out"
        base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # analyze: the cases in one forked worker per CPU (the default); -one and -whole: in this
        # process, where the whole-case windows' memory shows in this process's peak.
        res = analyze(run, workers=None if mode == "analyze" else 1)
        tables = sum(r.nbytes() for r in res["_rpcs"].values())
    else:
        raise SystemExit(f"unknown mode {mode}")
    wall = time.perf_counter() - t0
    extractor_kb = traceread.READ_STATS["extractor_peak_rss_kib"]
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    extra = {}
    if mode.startswith("analyze"):
        # What the process holds beyond the interpreter and its modules (its peak before the analysis)
        # and the per-RPC tables: the working set of the analysis itself.
        extra = {"tables_mib": round(tables / 2**20, 1),
                 "beyond_tables_mib": round((self_kb - base_kb) / 1024 - tables / 2**20, 1)}
    # The largest child: an analysis worker (it holds its own cases' tables, one window and the pages it
    # shares with this process from the fork), or a native extractor.
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    extra["children_peak_rss_mib"] = round(child_kb / 1024, 1) if child_kb else None
    print(json.dumps({**extra, "wall_s": wall, "events": traceread.READ_STATS["events"],
                      "decoded_events": traceread.READ_STATS["decoded_events"],
                      "readers": traceread.READ_STATS["readers"],
                      "peak_rss_mib": round(self_kb / 1024, 1),
                      "extractor_peak_rss_mib": round(extractor_kb / 1024, 1) if extractor_kb else None}))


def _anchor(dirs):
    """babeltrace2's command line reading each trace directory to its dummy sink, one process per
    CPU at a time: {"wall_s", "processes"}; None without babeltrace2 on PATH."""
    exe = shutil.which("babeltrace2")
    if not exe:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    todo, running, failed = list(dirs), [], []
    t0 = time.perf_counter()
    try:
        while todo or running:
            while todo and len(running) < cpus:
                d = todo.pop(0)
                running.append((d, subprocess.Popen([exe, "-o", "dummy", str(d)], stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.PIPE)))
            done = [x for x in running if x[1].poll() is not None]
            if not done:
                time.sleep(0.002)
            for d, proc in done:
                running.remove((d, proc))
                err = proc.communicate()[1]
                if proc.returncode != 0:
                    failed.append(f"{d}: {err.decode(errors='replace').strip()[-200:]}")
    finally:
        for _, proc in running:          # an interrupt: no babeltrace2 left behind
            proc.kill()
            proc.wait()
    wall = time.perf_counter() - t0
    if failed:
        raise UserError(f"babeltrace2 could not read {len(failed)} trace(s) of the run: "
                        f"{failed[0]}")
    return {"wall_s": wall, "processes": len(dirs)}


def _measure(mode, run_path, cache, target=None):
    argv = [sys.executable, "-m", "rpcscope.analysis.bench", "--child", mode, str(run_path), str(cache)]
    if target:
        argv.append(str(target))
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise UserError(f"the {mode} measurement failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["events_per_s"] = round(r["events"] / r["wall_s"]) if r["wall_s"] > 0 else None
    return r


def bench(run_path, do_analyze=True, progress=None):
    try:
        run = load_run(run_path)
    except RunError as e:
        raise UserError(str(e)) from None
    traces = run.trace_dirs()
    if not traces:
        raise UserError(f"{run_path}: no traces to read (capture with `rpcscope capture --out {run_path}`)")
    plan = [("decode", "first"), ("decode", "cached")]
    if do_analyze:
        plan += [("analyze", "first"), ("analyze-one", "first"), ("analyze", "cached"), ("analyze-one", "cached"),
                 ("analyze-whole", "cached")]
    sizes = sorted(traces, key=lambda t: _dir_bytes(t[1]))
    small, large = sizes[0], sizes[-1]
    plan += [("trace", small), ("trace", large), ("babeltrace2", "anchor")]
    rows = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rpcscope-bench-analysis-"))
    try:
        for k, (mode, what) in enumerate(plan):
            if progress:
                progress(k, len(plan), f"{mode} {what if isinstance(what, str) else what[0]}")
            if mode == "babeltrace2":
                r = _anchor(dict.fromkeys(p for _, p in traces))
                if r:
                    rows.append({**r, "measurement": "babeltrace2 -o dummy (anchor)", "events": None,
                                 "decoded_events": None, "peak_rss_mib": None, "extractor_peak_rss_mib": None,
                                 "trace_mib": None, "readers": {"babeltrace2": r["processes"]}})
                continue
            cache = tmp / mode.split("-")[0]
            if what == "first" or mode == "trace":
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir()
            target = what[1] if mode == "trace" else None
            r = _measure(mode, run.path, cache, target)
            r["measurement"] = f"{mode} ({what})" if isinstance(what, str) else f"trace alone: {what[0]}"
            if mode == "analyze-one":
                r["measurement"] = f"analyze ({what}), in one process"
            if mode == "analyze-whole":
                r["measurement"] = "analyze (cached), each case in one window"
            r["trace_mib"] = round(_dir_bytes(target) / 2**20, 1) if target else None
            rows.append(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Throughput counts each event of the run once: `analyze` reads some traces twice (the in-situ probe
    # calibration walks every case before the steps are rebuilt), which READ_STATS counts as reads.
    distinct = next(r["events"] for r in rows if r["measurement"] == "decode (first)")
    for r in rows:
        r["events_read"] = r["events"]
        if r["measurement"].startswith(("decode", "analyze", "babeltrace2")):
            r["events"] = distinct
            r["events_per_s"] = round(distinct / r["wall_s"]) if r["wall_s"] > 0 else None
    anchor = next((r["events_per_s"] for r in rows if r["measurement"].startswith("babeltrace2")), None)
    for r in rows:       # a single trace's rate is not the run's: no ratio for those rows
        r["of_anchor"] = round(r["events_per_s"] / anchor, 3) \
            if anchor and r["events_per_s"] and not r["measurement"].startswith("trace") else None
    total_bytes = sum(_dir_bytes(p) for _, p in traces)
    return {"run": str(run.path), "traces": len(traces), "trace_mib": round(total_bytes / 2**20, 1),
            "backend": "native (build/analysis/ctfcols)" if native.available() else "python (bt2)",
            "goal_events_per_s": 1_000_000, "anchor_events_per_s": anchor,
            "goal_of_anchor": GOAL_OF_ANCHOR, "measurements": rows}


def cmd_bench(args):
    prog = None
    if not args.json and sys.stderr.isatty():
        def prog(k, n, what):
            sys.stderr.write(f"\rbench analysis [{'#' * int(30 * k / n):<30}] {k}/{n} {what:<50}")
            sys.stderr.flush()
    try:
        res = bench(args.run, do_analyze=not args.no_analyze, progress=prog)
    finally:
        if prog:
            sys.stderr.write("\r" + " " * 100 + "\r")
    if args.json:
        emit_json(res)
        return 0
    print(f"{res['run']}: {res['traces']} traces, {res['trace_mib']} MiB of CTF, backend {res['backend']}")
    table([{"measurement": r["measurement"], "events": r["events"], "reads": r["events_read"] or "",
            "wall_s": round(r["wall_s"], 2),
            "events/s": r["events_per_s"], "of_anchor": "" if r["of_anchor"] is None else r["of_anchor"],
            "peak_rss_MiB": r["peak_rss_mib"] or "",
            "tables_MiB": r.get("tables_mib", ""), "beyond_tables_MiB": r.get("beyond_tables_mib", ""),
            "extractor_MiB": r["extractor_peak_rss_mib"] or "",
            "largest_child_MiB": r.get("children_peak_rss_mib") or "",
            "trace_MiB": r["trace_mib"] or "",
            "decoded_by": ", ".join(f"{k} {v}" for k, v in sorted(r.get("readers", {}).items())) or "cache"}
           for r in res["measurements"]],
          ["measurement", "events", "reads", "wall_s", "events/s", "of_anchor", "peak_rss_MiB", "tables_MiB",
           "beyond_tables_MiB", "extractor_MiB", "largest_child_MiB", "trace_MiB", "decoded_by"])
    print("events: the run's events (each once); reads: events returned by the trace reader, re-reads included")
    print("decoded_by: how many traces each reader decoded (ctfread: ctfcols's own CTF reader; libbabeltrace2: "
          "ctfcols where ctfread refused a trace; bt2-python: the Python salvage of a damaged trace; cache: none)")
    print("tables: the per-RPC tables analyze keeps; beyond_tables: peak RSS minus the interpreter with its "
          "modules and minus the tables (the analysis's working set: one window of calls at a time, "
          f"about {rpcs.WINDOW_EVENTS:,} events; 'one window' rebuilds each case whole, beside it)")
    print("analyze spreads the cases over one forked worker per CPU, which send their tables back (the peak "
          "RSS is this process's; largest_child: the largest worker or native extractor, whose RSS counts "
          "the pages it shares with this process); 'in one process': the same without workers")
    print("of_anchor: events/s over babeltrace2's own reader's on the same traces in this run (the "
          "figure that carries between runs on a host whose speed drifts)")
    first = next(r for r in res["measurements"] if r["measurement"] == "analyze (first)") \
        if any(r["measurement"] == "analyze (first)" for r in res["measurements"]) else None
    print(f"goal: >= {res['goal_events_per_s']:,} events/s end to end on the first run (where "
          f"babeltrace2 passes ~2.5 M: {res['goal_of_anchor']} of the anchor)"
          + (f"; this run: {first['events_per_s']:,} events/s, {first['of_anchor']} of the anchor"
             if first and first["of_anchor"] else ""))
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "analysis", help="the analysis's events/s, first and cached, and its peak memory",
        description="Throughput (events/s) and peak memory of decoding and analysing a run, first run "
                    "and cached, each in a fresh process; the run's own cache is not touched.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="runs/NAME", help="a run directory made by `rpcscope capture`")
    ap.add_argument("--no-analyze", action="store_true", help="measure decoding only")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.set_defaults(func=cmd_bench)
    return ap


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    else:
        raise SystemExit("usage: rpcscope bench analysis runs/NAME")
