"""Per step and payload size: completion-time statistics of a run, raw and
corrected for the probe effect, and the traced vs untraced round trip.

    from rpcscope.analysis.steps import analyze
    result = analyze("runs/x")             # dict, also written to runs/x/analysis/steps.{csv,json}, rtt.csv
                                           # and the per-RPC table rpcs.jsonl.gz (rpctable.py)

Times are in microseconds. A step's statistics are over the RPCs where it was
measured (status "measured"); "n/a" means the run's conditions rule the step out;
"missing" counts RPCs where it applies but its events were not found, by reason.
Per-fragment and per-window steps report the per-call sum of their occurrences
(see rpcs.py). "corrected" subtracts the calibrated cost of the tracepoints that
fell inside the step (manifest calibration; absent: corrected = raw); where an
event costs the call more than the emptiest step holding one of its class takes,
only that much is charged to its step and the rest is taken off every step in
proportion to its time (probe_split_rows, by the round-trip path's rule:
rtp.py probe_split).
"""
import csv
import json
import os

import numpy as np

from rpcscope.rundir import RTT_CSV, STEPS_CSV, STEPS_JSON, RunDir
from rpcscope.tracepoints import STEPS

from . import probe as probe_mod, traceread
from .clockreads import case_clock_reads
from .probe import path_probe_ns
from .rpcs import CALL_ROW, EXTRA_ROWS, MEASURED, MISSING, NOT_APPLICABLE, ROW_ORDER, incomplete, reconstruct
from .rpctable import write_rpc_table
from .rtpstats import SPLIT_COST_SPREAD, SPLIT_MIN_SHARE
from .run import (
    Run,
    RunError,
    call_edges_ns,
    level_p50_ns,
    level_rounds_p50s,
    load_run,
    modes_label,
    other_path_counts,
    traced_noise_pct,
    untraced_modes,
)
from .timeline import independent_check
from .tracenotes import trace_notes
from .wakeup import run_wake_costs
from .workers import CaseWorkers, cpu_workers

_STEP = {s["id"]: s for s in STEPS}
CSV_COLUMNS = ["case", "transport", "proc", "size", "step", "side", "name", "rtp", "status", "n", "missing",
               "did_not_occur",
               "mean_us", "median_us", "p10_us", "p90_us", "p99_us", "std_us",
               "corrected_mean_us", "corrected_median_us", "tracepoints_median", "occurrences_median",
               "missing_reasons", "clock_reads_median_us"]


def _stats(x):
    x = np.asarray(x, float) / 1000.0
    if not len(x):
        return {k: None for k in ("mean_us", "median_us", "p10_us", "p90_us", "p99_us", "std_us")}
    p10, p50, p90, p99 = np.percentile(x, [10, 50, 90, 99])
    return {"mean_us": float(x.mean()), "median_us": float(p50), "p10_us": float(p10), "p90_us": float(p90),
            "p99_us": float(p99), "std_us": float(x.std(ddof=1)) if len(x) > 1 else 0.0}


def _class_costs(cal):
    """{"user": ns, "kernel": ns or None} of one role's calibration: one cost per class, or None where
    a class has none, or several (a loopback calibration's cost per kernel event name)."""
    kev = cal.get("kernel_event_ns") or {}
    if "all" in kev:
        k = kev["all"]
    elif set(kev) == {"net", "other"} and abs(kev["net"] - kev["other"]) <= SPLIT_COST_SPREAD * max(kev.values()):
        k = kev["other"]
    else:
        k = None
    u = cal.get("ust_event_ns")
    return {"user": float(u) if u and u > 0 else None, "kernel": float(k) if k and k > 0 else None}


def probe_split_rows(rpcs):
    """(the rest of one event's cost beyond its direct cost, per class (user, kernel); the per-RPC
    factor) for the step tables' correction, by the round-trip path's rule (rtp.probe_split): each
    event is charged in place only what the emptiest step holding one event of its class and nothing
    else takes (per occurrence: its mean over the RPCs where each of its occurrences holds just that,
    in SPLIT_MIN_SHARE of them or more), and the rest of the events' cost on the call (the RTT row's
    charge: the client's CPU outside its waits and the server's during them) is taken off every step
    in proportion to the time it keeps after its direct charges, one factor per RPC. None where the
    roles' events cost differently or no class splits: every event is charged in place then."""
    costs = [_class_costs(rpcs.case.calibration(r)) for r in ("client", "server")]
    if costs[0] != costs[1]:
        return None
    n, extra = len(rpcs), {}
    for k, cost in costs[0].items():
        means = []
        for s in STEPS:
            row = rpcs.rows[s["id"]]
            mine = row.user_events if k == "user" else row.tracepoints - row.user_events
            # one event of the class per occurrence and nothing else (per-fragment steps: a sum)
            m = (row.status == MEASURED) & (row.count > 0) & (row.tracepoints == row.count) & (mine == row.count)
            if m.sum() and m.sum() >= SPLIT_MIN_SHARE * n:
                means.append(float((row.dur[m] / row.count[m]).mean()))
        extra[k] = cost - min(cost, min(means)) if cost and means else 0.0
    if not any(extra.values()):
        return None
    rtt = rpcs.rows[CALL_ROW]
    spread = _beyond(rtt, extra)
    room = rtt.dur - (rtt.cost - spread)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(room > 0, 1.0 - spread / room, 1.0)
    return extra, factor


def _clock_summary(case):
    got = case_clock_reads(case)
    if got is None or "error" in got:
        return got
    return {k: v for k, v in got.items() if k != "rows"}


def _split_summary(rpcs, split):
    if split is None:
        return None
    extra, factor = split
    m = rpcs.rows[CALL_ROW].status == MEASURED
    return {"user_beyond_ns": round(extra["user"], 1), "kernel_beyond_ns": round(extra["kernel"], 1),
            "factor_median": round(float(np.median(factor[m])), 4) if m.any() else None}


def _beyond(row, extra):
    """Per RPC: the row's events' cost beyond their direct cost."""
    return row.user_events * extra["user"] + (row.tracepoints - row.user_events) * extra["kernel"]


def split_corrected(row, split):
    """A row's per-RPC corrected durations: the in-place charge (dur - cost) without a split, else
    (dur - its direct charges) x the RPC's factor (probe_split_rows)."""
    if split is None:
        return row.corrected
    extra, factor = split
    return (row.dur - (row.cost - _beyond(row, extra))) * factor


def case_tables(rpcs):
    """(step_rows, rtt_summary) of one case, its probe split (probe_split_rows) worked out once for both."""
    split = probe_split_rows(rpcs)
    return step_rows(rpcs, split), rtt_summary(rpcs, split)


def step_rows(rpcs, split):
    """One dict per row (catalog step or extra row) of one case; split: probe_split_rows(rpcs)."""
    case = rpcs.case
    clock = (case_clock_reads(case) or {}).get("rows") or {}
    out = []
    for name in ROW_ORDER:
        row = rpcs.rows[name]
        if name in EXTRA_ROWS:
            side, _, title = EXTRA_ROWS[name]
            rtp = None
        else:
            st = _STEP[name]
            side, title, rtp = st["side"], st["name"], st["rtp"]
        m = row.status == MEASURED
        na = len(row.status) > 0 and bool((row.status == NOT_APPLICABLE).all())
        d = {"case": case.id, "transport": case.transport, "proc": case.proc, "size": case.size,
             "step": name, "side": side, "name": title, "rtp": rtp,
             "status": "n/a" if na else ("measured" if m.any() else "missing"),
             "n": int(m.sum()), "missing": 0 if na else int((row.status == MISSING).sum()),
             # RPCs where the step applies but did not happen (a wait for a message already there)
             "did_not_occur": 0 if na else int((row.status == NOT_APPLICABLE).sum())}
        d.update(_stats(row.dur[m]))
        c = _stats(split_corrected(row, split)[m])
        d["corrected_mean_us"], d["corrected_median_us"] = c["mean_us"], c["median_us"]
        # the clock build's figure for the row (capture --clock-reads; analysis/clockreads.py)
        d["clock_reads_median_us"] = (clock.get(name) or {}).get("median_us")
        d["tracepoints_median"] = float(np.median(row.tracepoints[m])) if m.any() else None
        d["occurrences_median"] = float(np.median(row.count[m])) if m.any() else None
        d["missing_reasons"] = {} if na else dict(row.reasons)
        out.append(d)
    return out


def rtt_summary(rpcs, split):
    case = rpcs.case
    row = rpcs.rows[CALL_ROW]
    m = row.status == MEASURED
    traced = float(np.median(row.dur[m])) / 1000 if m.any() else None
    # Corrected: the probe cost on the round-trip path taken off (the in-situ calibration's events on
    # the path times the other cases' costs: the same correction as `rpcscope rtp`), else every event
    # on the client's CPU outside its waits (rpcs.py's RTT charge; over-corrects, for it also removes
    # the events of steps that overlap the path).
    path_ns = path_probe_ns(case.run, case.id) if m.any() else None
    if path_ns is not None:
        # ... plus the call's edges, which the client's clock measures and the trace's RTT does not
        # (run.call_edges_ns; rtp.py's "client call edges"): the calibration charges the whole probe
        # effect to the events on the path, so that without them the corrected RTT comes out short.
        edges = call_edges_ns(case.meta, row.dur[m].tolist()) or 0.0
        corrected = traced + (edges - path_ns) / 1000
        corrected_by = "round-trip path (its events at the transport's per-event prices) and the call's edges"
    else:
        corrected = float(np.median(row.corrected[m])) / 1000 if m.any() else None
        corrected_by = "events on the client's CPU outside its waits (loopback costs)"
    untraced = (case.meta.get("untraced") or {}).get("p50")
    untraced = untraced / 1000 if untraced else None
    pct = lambda a: (a - untraced) / untraced * 100 if a is not None and untraced else None  # noqa: E731
    # Per-RPC sum of the client's steps (no overlap: the receive softirq runs in another context).
    client = [n for n in ROW_ORDER if n in _STEP and _STEP[n]["side"] == "client" and _STEP[n].get("role") != "softirq"]
    tot = np.zeros(len(rpcs))
    for n in client:
        r = rpcs.rows[n]
        tot += np.where(r.status == MEASURED, r.dur, 0.0)
    ok, why = incomplete(rpcs)
    return {"case": case.id, "transport": case.transport, "proc": case.proc, "size": case.size,
            "calls": case.calls, "rpcs": len(rpcs), "excluded": dict(rpcs.excluded),
            "complete_rpcs": int(ok.sum()), "incomplete_by_first_missing_step": dict(why.most_common()),
            "traced_rtt_median_us": traced, "corrected_rtt_median_us": corrected, "corrected_by": corrected_by,
            "traced_rtt_p50_client_us": ((case.meta.get("traced") or {}).get("p50") or 0) / 1000 or None,
            # How far one traced run moves from the next (half the spread of the rounds in the kept round's
            # speed level, % of the untraced p50; analysis/run.py traced_noise_pct).
            "traced_noise_pct": traced_noise_pct(case.meta),
            # The capture's runs took turns (capture --turns): its rounds' p50s are taken over the
            # case's round factors (analysis/run.py case_round_factors).
            "took_turns": bool((case.meta.get("repeats") or {}).get("turns")),
            "untraced_p50_us": untraced, "traced_vs_untraced_pct": pct(traced),
            # The medians of the untraced and traced rounds in the kept round's speed level (None with fewer
            # than three there; analysis/run.py level_p50_ns).
            "untraced_level_p50_us": _us(level_p50_ns(case.meta, "untraced")),
            "traced_level_p50_us": _us(level_p50_ns(case.meta, "traced")),
            "level_rounds": len(level_rounds_p50s(case.meta, "untraced")),
            # The sleeps and interrupts per call its untraced runs had beyond the traced run (0 where
            # the same; analysis/run.py other_path_counts).
            "other_path": other_path_counts(case.meta),
            # The modes of the kept untraced run's calls, and which holds its p50 (analysis/run.py
            # untraced_modes): where there are several, the p50 follows the share of each.
            "untraced_modes": untraced_modes(case.run.path, case.meta),
            "corrected_vs_untraced_pct": pct(corrected),
            # How the step tables' corrected columns charge the probes (probe_split_rows): per class,
            # what one event costs beyond the direct cost charged to its own step, and the median
            # factor by which every step's time after its direct charges is scaled to take that rest
            # off; None: each event's whole cost charged to the step it lies in.
            "probe_split": _split_summary(rpcs, split),
            # The clock build's run of the case (capture --clock-reads): its own RTT p50 (the host's
            # speed level it ran in), its marks; or why there is none.
            "clock_reads": _clock_summary(case),
            "client_steps_sum_median_us": float(np.median(tot)) / 1000 if len(tot) else None,
            "conditions": {k: sorted(v) for k, v in rpcs.conditions.items()},
            "problems": rpcs.problems,
            "trace_readers": _readers(case, rpcs.has_kernel),
            "clock_sync": clock_sync(case)}


def _us(ns):
    return ns / 1000 if ns is not None else None


def clock_sync_summary(rtts, run):
    """The run's clock-sync line: per case in rtt[].clock_sync; here what they add up to, for the one
    host pair (the server against the client)."""
    fits = [dict(d["clock_sync"], case=d["case"]) for d in rtts if d.get("clock_sync")]
    ok = [f for f in fits if f["quality"] != "failed"]
    hosts = {n: h.get("role") for n, h in run.hosts.items()}
    out = {"method": "convex hull over the client's and the server's user send/receive marks, per case "
                     "(analysis/clocksync.py), applied to the server's events where each host has its own "
                     "kernel (analysis/timeline.py)",
           "reference": next((n for n, r in hosts.items() if r == "client"), None),
           "host": next((n for n, r in hosts.items() if r == "server"), None),
           "shared_kernel": bool(run.manifest.get("testbed", {}).get("shared_kernel")), "cases": len(fits),
           "failed": len(fits) - len(ok), "quality": sorted({f["quality"] for f in fits}),
           "applied": sum(bool(f.get("applied")) for f in fits),
           "flagged": [{"case": f["case"], "flag": f["flag"]} for f in fits if f.get("flag")]}
    if ok:
        out.update(offset_ns_range=[min(f["offset_ns"] for f in ok), max(f["offset_ns"] for f in ok)],
                   accuracy_ns_range=[min(f["accuracy_ns"] for f in ok), max(f["accuracy_ns"] for f in ok)],
                   drift_ppm_range=[min(f["drift_ppm"] for f in ok), max(f["drift_ppm"] for f in ok)],
                   points_range=[min(sum(f["pairs"].values()) for f in ok), max(sum(f["pairs"].values()) for f in ok)],
                   metadata_shift_ns=sorted({f.get("metadata_shift_ns", 0) for f in ok}),
                   zero_within_bound=sum(bool(f["zero_within_bound"]) for f in ok))
    checks = [f["check"] for f in fits if f.get("check")]
    if checks:
        out["check"] = {"method": next((c["method"] for c in checks if c.get("method")), None), "cases": len(checks),
                        "agrees": sum(c.get("agrees") is True for c in checks),
                        "errors": sorted({c["error"] for c in checks if c.get("error")})}
    return out


def clock_sync(case):
    """The server's clock against the client's for a case (timeline.py, clocksync.py's convex hull over
    the client's and the server's user send and receive marks, both directions): the fit, its bound
    and quality, whether it maps the server's events (a kernel per host) and why a case's cross-host
    order is not established (flag). On the local testbed both share one kernel clock, so the offset
    must come out as zero within the bound (`zero_within_bound`). The user marks lie outside the send
    and receive syscalls, so the bound is loose (about 10-20 us on one kernel) but honest."""
    tl = case.timeline()
    d = tl.as_dict()
    shared = bool(case.run.manifest.get("testbed", {}).get("shared_kernel"))
    d.update(reference="client", host=case.host_of("server"), shared_kernel=shared,
             zero_within_bound=(abs(d["offset_ns"]) <= d["accuracy_ns"]) if d["offset_ns"] is not None else None)
    # The capture's own timestamp exchange over SSH, where it took one (capture --inventory).
    d["check"] = independent_check(case.meta.get("clock_check"), d)
    return d


def _readers(case, kernel):
    """Which reader decoded the case's traces ("ust: ctfread; kernel: ctfread"; traceread's sources): a
    figure's origin down to the decoder, and a sign when a trace was damaged (libbabeltrace2 or the
    Python salvage instead of ctfread)."""
    kinds = ("ust", "kernel") if kernel else ("ust",)
    return "; ".join(f"{kind}: " + ", ".join(sorted({src.get("reader") or "unknown" for st in case.stored(kind)
                                                     for src in st.sources}))
                     for kind in kinds)


def analyze(run_path, progress=None, write=True, kernel=True, workers=None):
    """run_path: a run directory, or a loaded Run (whose cache_dir and out_dir may point elsewhere).
    workers: processes for the cases (default one per CPU; 1: all in this process). progress(k,
    ncases, case id, done, total, what=None) as cases are rebuilt."""
    run = run_path if isinstance(run_path, Run) else load_run(run_path)
    if run.calibrate is None:
        run.calibrate = probe_mod.in_situ     # the probe costs every case is corrected with
    cases = [c for c in run.cases if c.complete]
    if not cases:
        raise RunError(_no_case_message(run))
    workers = cpu_workers(len(cases), workers)
    if progress:
        progress(0, len(cases), "all", 0, 0)
    if workers > 1:
        steps, rtts, per_rpc = _in_workers(run, cases, workers, progress, kernel)
    else:
        run.prefetch()
        finished = False
        try:
            steps, rtts, per_rpc = _in_process(run, cases, progress, kernel)
            finished = True
        finally:
            run.finish_prefetch(cancel=not finished)
    result = {"run": str(run.path), "calibrated": bool(run.manifest.get("calibration")),
              "kernel_collector": run.manifest.get("kernel_collector"),
              "placement": run.manifest.get("placement"), "wait": run.manifest.get("wait"),
              "server_executors": run.manifest.get("server_executors"),
              "skipped_cases": [c.id for c in run.cases if not c.complete],
              "clock_sync": clock_sync_summary(rtts, run),
              # A wake-up's unit costs per role's CPU, from the capture's rpc-wakecal
              # (analysis/wakeup.py).
              "wake_costs": run_wake_costs(run.manifest),
              "steps": steps, "rtt": rtts}
    # What is wrong with the traces, one note per problem naming the file and what to do (tracenotes.py);
    # partial: the capture was interrupted, and the cases it did not finish are left out.
    result["trace_problems"] = [n.as_dict() for n in trace_notes(run, rtts, kernel)]
    result["interrupted"] = bool(run.manifest.get("interrupted"))
    result["partial"] = result["interrupted"] or bool(result["skipped_cases"])
    result["capture_note"] = capture_note(run)
    if write:
        run.out_dir.mkdir(parents=True, exist_ok=True)
        with open(run.out_dir / STEPS_CSV, "w", newline="") as f:
            w = csv.DictWriter(f, CSV_COLUMNS)
            w.writeheader()
            for d in steps:
                w.writerow({k: json.dumps(v) if isinstance(v, dict) else ("" if v is None else v)
                            for k, v in d.items()})
        with open(run.out_dir / RTT_CSV, "w", newline="") as f:
            cols = [k for k in rtts[0] if k not in ("excluded", "conditions", "problems", "other_path",
                                                     "incomplete_by_first_missing_step", "clock_sync")] if rtts else []
            cols += ["clock_quality", "clock_offset_ns", "clock_accuracy_ns", "clock_drift_ppm", "clock_points",
                     "clock_applied", "clock_check_agrees", "clock_flag"] if rtts else []
            w = csv.DictWriter(f, cols, extrasaction="ignore")
            w.writeheader()
            for d in rtts:
                cs = d["clock_sync"]
                flat = dict(d, clock_quality=cs["quality"], clock_offset_ns=cs["offset_ns"],
                            clock_accuracy_ns=cs["accuracy_ns"], clock_drift_ppm=cs["drift_ppm"],
                            clock_points=sum(cs["pairs"].values()), clock_applied=cs.get("applied"),
                            clock_check_agrees=(cs.get("check") or {}).get("agrees"), clock_flag=cs.get("flag"),
                            untraced_modes=modes_label(d.get("untraced_modes")))
                w.writerow({k: "" if flat[k] is None else flat[k] for k in cols})
        (run.out_dir / STEPS_JSON).write_text(json.dumps(result, indent=1, default=str))
        write_rpc_table(run.out_dir, per_rpc)
    result["_rpcs"] = per_rpc
    return result


def capture_note(run):
    """What the run's capture-state.json (collectors/leftovers.py: present while its capture runs, and
    after one was killed) says of the capture, or None."""
    try:
        pid = int(json.loads(RunDir(run.path).capture_state.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    except PermissionError:
        alive = True
    return (f"its capture (pid {pid}) is still running: analyse the run once it has ended" if alive else
            f"its capture (pid {pid}) was killed: the next capture or `rpcscope testbed down` removes what it left")


def _no_case_message(run):
    note = capture_note(run)
    if note:
        return f"{run.path}: no case finished yet; {note}"
    mf = RunDir(run.path).manifest_path
    if not run.cases:
        return (f"{mf} lists no case: the capture was interrupted before its first case"
                if run.manifest.get("interrupted") or run.manifest.get("complete") is False
                else f"{mf} lists no case") + f"; capture the run again (`rpcscope capture --out {run.path} --replace`)"
    return (f"{run.path}: none of its {len(run.cases)} cases was finished (the capture was interrupted"
            f"{'' if run.manifest.get('interrupted') else ' or failed'}: cases[].complete is false); nothing to "
            f"analyse: capture the run again (`rpcscope capture --out {run.path} --replace`)")


def _in_process(run, cases, progress, kernel):
    """Every case in this process, while decoding threads (Run.prefetch) fill the cache ahead of it."""
    steps, rtts, per_rpc = [], [], {}
    for k, case in enumerate(cases):
        cb = (lambda done, tot, k=k, case=case: progress(k, len(cases), case.id, done, tot)) if progress else None
        if cb:
            cb(0, 0)
        r = reconstruct(case, progress=cb, kernel=kernel)
        rows, rtt = case_tables(r)
        steps += rows
        rtts.append(rtt)
        r.release()
        per_rpc[case.id] = r
    return steps, rtts, per_rpc


def _in_workers(run, cases, workers, progress, kernel):
    """The same as _in_process, the cases spread over forked workers (workers.py), each decoding its
    own cases' traces (the native extractor, a process of its own) and rebuilding them, so that
    decoding and analysis together keep every CPU busy. Phase one rebuilds every case, the largest
    first, and walks the calibration's sample of its paths (when probe.json does not hold the
    calibration yet); the calibration is solved here from all of them and sent to the workers; phase
    two charges each case's probe costs and makes its tables in the worker that rebuilt it, which
    sends them back."""
    index = {c.id: k for k, c in enumerate(run.cases)}
    ks = [index[c.id] for c in cases]
    pending = probe_mod.per_case_pending(run)
    if pending is None:
        run.probe                 # cached, or an older run's calibration: ready before the fork
    else:
        run._probe = {}           # while the calibration is walked, the cases use none (Run.probe)
    walk = {index[c.id] for c in pending[1]} if pending else set()
    n, done = len(cases), 0
    first = sorted(set(ks) | walk, key=lambda k: -run.cases[k].trace_bytes())
    ops = {"rebuild": _w_rebuild, "set_probe": _w_set_probe, "tables": _w_tables, "read_stats": _w_read_stats}
    stats_at_fork = {**traceread.READ_STATS, "readers": dict(traceread.READ_STATS["readers"])}
    with CaseWorkers(run, workers, ops) as pool:
        points = {}
        for k, pt in pool.map("rebuild", first, (kernel, walk)):
            if k in walk:
                points[run.cases[k].id] = pt
            if progress and k in ks:
                done += 1
                progress(0, 1, run.cases[k].id, done, 2 * n, what=f"{done}/{n} cases rebuilt ({workers} workers)")
        if pending:
            run._probe = probe_mod.per_case_solve(run, pending[0], points)
        pool.broadcast("set_probe", run._probe)
        got, done = {}, 0
        for k, (rows, rtt, r) in pool.map("tables", ks, kernel):
            got[k] = (rows, rtt, r.attach(run.cases[k], kernel))
            done += 1
            if progress:
                progress(0, 1, run.cases[k].id, n + done, 2 * n, what=f"{done}/{n} cases charged and tabled")
        for st in pool.broadcast("read_stats", stats_at_fork):
            traceread.add_read_stats(st)
    steps, rtts, per_rpc = [], [], {}
    for k in ks:
        rows, rtt, r = got[k]
        steps += rows
        rtts.append(rtt)
        per_rpc[run.cases[k].id] = r
    return steps, rtts, per_rpc


# The workers' side of _in_workers (module-level: the forked workers call them by name).
def _w_rebuild(run, k, arg):
    kernel, walk = arg
    case = run.cases[k]
    reconstruct(case, kernel=kernel)
    return probe_mod.case_point(case) if k in walk else None


def _w_set_probe(run, k, probe):
    run._probe = probe


def _w_read_stats(run, k, at_fork):
    """What this worker read since it was forked."""
    st = dict(traceread.READ_STATS)
    for key in ("events", "decoded_events"):
        st[key] -= at_fork[key]
    st["readers"] = {name: n - at_fork["readers"].get(name, 0) for name, n in st["readers"].items()}
    return st


def _w_tables(run, k, kernel):
    r = reconstruct(run.cases[k], kernel=kernel)
    rows, rtt = case_tables(r)
    r.release()
    return rows, rtt, r
