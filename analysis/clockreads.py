"""The clock build's step times: an independent figure beside each probe-corrected step.

A tracepoint costs the call ~200 ns on this VM, most of a short step, so what a step costs without
the probes rests on how their cost is charged (analysis/probe.py). The
clock build of the RPC (make TRACE=clock, rpc/clockmark.h) keeps each step mark as one clock read
(~25 ns) in memory, and `rpcscope capture --clock-reads` runs it in every round of every case, keeping a
ring of the latest marks there, then once more per case after the rounds keeping every mark
(cases/ID/clock-client.txt.gz, clock-server.txt.gz). These figures are an independent check of each
probe-corrected step. Here each step with a user begin and end mark
(and the user-mark spans C7-C9, S8-S10, C14-C17 and the RTT, as analysis/rpcs.py builds them) is
timed from one to the other on the same thread, summed per call as the step tables are, over the
measured calls (the first call and the warm-up calls left out, as rpcs.py does), its median per row.

    from rpcscope.analysis.clockreads import case_clock_reads
    got = case_clock_reads(case)      # None: no clock run; {"error": ...}; else {"rows": {...}, ...}

A clock read sits inside each step it bounds, so every figure holds one read (~20 ns) of its own.
Kernel-bounded steps (C8, S1, C15, the wake-ups) have no user marks and no clock figure.
"""
import numpy as np

from rpcscope.tracepoints import SPANS as CATALOG_SPANS, STEPS

from .rpcs import CALL_BEGIN_MARK, _attach_zero_ids
from .traceread import TraceError, read_clockmarks

_STEP = {s["id"]: s for s in STEPS}
# The user-mark spans of analysis/rpcs.py's extra rows (the catalog's [spans]): from the first mark of
# one step to the last of another.
SPANS = {name: (sp["first"], sp["last"]) for name, sp in CATALOG_SPANS.items()}


def row_marks():
    """{row: (begin mark, end mark)}: every catalog step with two user marks or more, and SPANS."""
    out = {s["id"]: (s["user_events"][0], s["user_events"][-1]) for s in STEPS if len(s["user_events"]) >= 2}
    for row, (a, b) in SPANS.items():
        out[row] = (_STEP[a]["user_events"][0], _STEP[b]["user_events"][-1])
    return out


def _pairs(marks, begin, end):
    """(call id, duration ns) of each begin mark with the next end mark on its thread, where no other
    begin mark of the row comes between them."""
    names = {n: i for i, n in enumerate(marks["names"])}
    if begin not in names or end not in names:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    out_c, out_d = [], []
    for t in np.unique(marks["tid"]).tolist():
        on = marks["tid"] == t
        b = np.nonzero(on & (marks["name"] == names[begin]))[0]
        e = np.nonzero(on & (marks["name"] == names[end]))[0]
        if not len(b) or not len(e):
            continue
        j = np.searchsorted(e, b)                      # the next end after each begin (record order)
        ok = j < len(e)
        nxt = np.append(b[1:], np.iinfo(np.int64).max)
        ok &= np.where(ok, e[np.minimum(j, len(e) - 1)] < nxt, False)
        bi, ei = b[ok], e[j[ok]]
        out_c.append(marks["call_id"][bi])
        out_d.append(marks["ts"][ei] - marks["ts"][bi])
    if not out_c:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    return np.concatenate(out_c), np.concatenate(out_d)


def _measured_calls(client, warmup):
    """The calls the step tables count: those with a c1_begin, less the first call and the warm-up
    calls of each activity (rpc/bench.c's order: the sequence number in the call id's low half)."""
    begin = CALL_BEGIN_MARK
    names = {n: i for i, n in enumerate(client["names"])}
    starts = np.unique(client["call_id"][client["name"] == names.get(begin, -1)])
    act, seq = starts >> np.uint64(32), starts & np.uint64(0xFFFFFFFF)
    keep = []
    for a in np.unique(act):
        mine = np.sort(seq[act == a])[1 + warmup:]
        keep.append((a << np.uint64(32)) | mine)
    return np.concatenate(keep) if keep else np.zeros(0, np.uint64)


def clock_rows(client, server, warmup):
    """{row: {"median_us", "calls"}} from the two roles' marks (read_clockmarks): each row's per-call
    sum over the measured calls where it occurred, its median."""
    calls = _measured_calls(client, warmup)
    # a listener's marks before recvfrom returns carry call id 0: they take the next one on the thread
    marks = {side: dict(m, call_id=_attach_zero_ids(m["tid"], m["call_id"]))
             for side, m in (("client", client), ("server", server))}
    out = {}
    for row, (begin, end) in row_marks().items():
        side = _STEP[row]["side"] if row in _STEP else _STEP[SPANS[row][0]]["side"]
        cid, dur = _pairs(marks[side], begin, end)
        m = np.isin(cid, calls)
        if not m.any():
            continue
        u, inv = np.unique(cid[m], return_inverse=True)
        per_call = np.bincount(inv, weights=dur[m].astype(float), minlength=len(u))
        out[row] = {"median_us": float(np.median(per_call)) / 1000, "calls": int(len(u))}
    return out


def case_clock_reads(case):
    """The case's clock-read figures: None where the capture made no clock run; {"error": why} where it
    failed or its files cannot be read; else {"rows": clock_rows, "client_p50_us" (the clock run's own
    RTT p50, which tells the host's speed level it ran in), "marks", "dropped", "torn"}. Read once per
    case object (the step rows and the case summary both ask)."""
    memo = case.__dict__
    if "_clock_reads" not in memo:
        memo["_clock_reads"] = _read_case(case)
    return memo["_clock_reads"]


def _read_case(case):
    meta = case.meta.get("clock_reads")
    if not meta:
        return None
    if meta.get("error"):
        return {"error": meta["error"]}
    try:
        got = {role: read_clockmarks(case.run.path / case.meta["dir"] / f) for role, f in meta["files"].items()}
    except TraceError as e:
        return {"error": str(e)}
    rows = clock_rows(got["client"], got["server"], case.warmup)
    return {"rows": rows, "client_p50_us": meta["client_p50_ns"] / 1000,
            "marks": sum(g["marks"] for g in got.values()), "dropped": sum(g["dropped"] for g in got.values()),
            "torn": sum(g["torn"] for g in got.values())}
