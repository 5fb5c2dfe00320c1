"""Per-RPC reconstruction: for each call of a case and each catalog step, when
it began, when it ended, how long it took, or why it has no duration.

    from rpcscope.analysis.run import load_run
    from rpcscope.analysis.rpcs import reconstruct
    r = reconstruct(load_run("runs/x").cases[0])
    r.rows["C8"].dur          # ns per RPC (NaN where not measured), r.call_ids the RPCs
    r.rows["C8"].status       # MEASURED / NOT_APPLICABLE / MISSING per RPC
    r.rows["C8"].reasons      # Counter of why it is missing
    r.rows["C8"].occurrences(i)   # [(begin, end, cpu)] of RPC i
    r.excluded                # Counter of why whole RPCs were left out

Rules (the catalog is tracepoints/steps.toml):

* User events are grouped by call id. An event with call id 0 (a listener before
  its recvfrom returns) belongs to the next event on the same thread that carries
  one. Only the case's own processes count (the manifest's pids). The first call
  and the `warmup` calls after it, per client activity in call-sequence order,
  are warm-up (rpc/bench.c measures neither).
* A step with a begin and an end user mark and `per = "call"` runs from the
  first event of its first mark to the last event of its last mark.
* A step repeated per fragment or window (`per`) has one occurrence per
  begin ... end pair on its thread; its duration is the SUM over the call's
  occurrences, `count` says how many there were, begin/end are the first
  occurrence's begin and the last one's end.
* Steps with one user mark or none are bounded by kernel events on the step's
  thread (catalog kernel_begin/kernel_end), found by thread and time inside the
  user marks that surround them:
    C7  c7_begin -> sys_enter_send*   C8 enter -> sys_exit_send* (C8' to the first
    net_dev_xmit of the thread, C8'' after it)   C9 exit -> c9_end; S8/S9/S10 alike.
    C14 c14_begin -> sched_switch out of the client thread (before c17_end)
    C15 NET_RX softirq_entry (of the softirq the waking ran in, on its CPU; it may
        begin before the switch out) -> sched_waking of the client (a waking that
        raced the switch out comes just before it); C16 waking -> sched_switch back in
    C17 sys_exit_epoll_wait -> c17_end
    S1/S2 as C15/C16 for the listener, before s3_end (s4_end with --wait recv);
    S3 sys_exit_epoll_wait -> s3_end; S14 s14_begin -> sched_switch out (or the
    wait's return when it did not sleep). A fragment the listener did not wait
    for (it came while the listener took the one before) has no S1/S2; a reply
    the client did not wait for, no C14-C16. A call that waited for no message
    at all (it was there at the non-blocking select, or came as the blocking
    wait began) is whole: those steps are NOT_APPLICABLE to that RPC alone.
  With --wait recv the absent begin marks of C18/S4 are the switch back in.
* A step the run's conditions rule out (transport, inline server, veth link,
  single window, waiting mode, one-way procedure) is NOT_APPLICABLE for every
  RPC. A step that applies but whose events are not there is MISSING for that RPC,
  with a reason (no kernel trace, the thread did not sleep, an event not found).
* Extra rows: C8', C8'', S9', S9'' (the sendmsg split), and spans from user
  marks alone, which need no kernel trace: "C7-C9" (c7_begin..c9_end), "S8-S10",
  "C14-C17" (c14_begin..c17_end, or ..c18_end with --wait recv: the client's
  whole wait), "RTT" (c1_begin..c21_end).
* Windows: a case is rebuilt a window of calls at a time (about WINDOW_EVENTS events), each from
  the user and kernel events of its own time range, read from the cache (Case.span). The range
  reaches from the start of the calls begun just before the window's first to the end of those
  begun just after its last, so every rule sees what it would in the whole trace (a test rebuilds
  the fixture in windows of 1, 4 and 7 calls and compares every row). Memory then holds the
  per-RPC tables and one window; warm-up and orphan calls are decided first, over the whole user
  trace read in chunks (_Plan). Real hosts (a trace per host, two clocks) are rebuilt in one window.
* Probe cost ("corrected"): each tracepoint is charged to the interval that
  follows its timestamp. A step occurrence [begin, end) on CPU c is charged the
  calibrated cost of every user and kernel event recorded on c with begin <= ts
  < end (c: the CPU of the occurrence's end event); the corrected duration is the
  raw one minus that. The RTT's charge: events on the client's CPU during the
  call, except while the client waits (switch out .. waking), plus events on the
  server's CPU during those waits (one CPU: the same thing). Calibration costs
  that are null (too rare to measure) count 0, negative ones (noise) count 0.
  Each row also counts its user events (user_events): the step tables split an
  event's cost between its own step and the rest of the call (steps.py
  probe_split_rows, by the round-trip path's rule: rtp.py probe_split).
"""
import collections
import types

import numpy as np

from rpcscope.tracepoints import SPANS, SPLIT, STEPS, applicable, span_steps

# The parts live in rpckernel.py (kernel events and probe classes), rpcrows.py (the tables) and
# rpcsteps.py (the rules); their names the analysis, the reports and the tests use are importable here.
from .rpckernel import (  # noqa: F401
    CLASS_NET,
    CLASS_OTHER,
    CLASS_UST,
    COST_COLUMNS,
    N_CLASSES,
    _attach_zero_ids,
    _Costs,
    _first_per,
    _Kernel,
    _last_per,
    _ProbeEvents,
)
from .rpcrows import (  # noqa: F401
    _MARK,
    _STEP,
    CALL_BEGIN_MARK,
    CALL_END_MARK,
    CALL_FIRST,
    CALL_LAST,
    CALL_ROW,
    EXTRA_ROWS,
    MEASURED,
    MISSING,
    NOT_APPLICABLE,
    ROW_ORDER,
    CaseRPCs,
    Row,
    _trim,
    incomplete,
)
from .rpcsteps import (  # noqa: F401
    _MARK_CODE,
    _STEP_INDEX,
    BEGIN,
    END,
    NOT_TAKEN_REPLY,
    OTHER,
    _client_kernel,
    _Ctx,
    _is_none,
    _Marks,
    _or_reason,
    _put,
    _reasons,
    _rtt,
    _sends,
    _server_kernel,
    _sleeps,
    _span,
    _sub,
    _to_next_end,
    _user_steps,
    _wake,
)
from .traceread import KIND

# A case is rebuilt a window of calls at a time, each from the events of its own time range (read
# from the cache): memory holds the per-RPC tables and one window's events (about 170 bytes an event
# while it is rebuilt), whatever the length of the capture. A window holds about this many events.
WINDOW_EVENTS = 250_000
# The columns a window reads (traceread.COLUMNS): what the rules here and the graph (rtp.py) use.
USER_COLUMNS = ("ts", "kind", "tid", "cpu", "call_id", "name")
KERNEL_COLUMNS = ("ts", "kind", "cpu", "tid", "tid2", "state", "vec", "skb", "dev", "name")


def reconstruct(case, progress=None, kernel=True, window_calls=None):
    """Rebuild every measured RPC of a case (once per case object: later calls return the same
    CaseRPCs). progress(done, total) is called as windows of RPCs are done. window_calls: calls per
    window (default: as many as make about WINDOW_EVENTS events)."""
    memo = case.__dict__.setdefault("_reconstructed", {})
    if kernel not in memo:
        memo[kernel] = _reconstruct(case, progress, kernel, window_calls)
    elif progress:
        progress(len(memo[kernel]), len(memo[kernel]))
    return memo[kernel]


class _Plan:
    """What a case's whole user trace says before its RPCs are rebuilt a window at a time: which
    threads are the case's own (roles), which calls are measured (call_ids, sorted), why the others
    are left out, and the time range each window of calls must read (windows())."""

    def __init__(self, case):
        pids, threads = {}, {}              # tid -> pid of its first event; tid -> {"pid", "procname"}
        c1, c21, ids = [], [], []          # (tid, call id, ts) of c1_begin and c21_end; (tid, call ids)
        for st in case.stored("ust"):
            for t, v in st.threads.items():
                threads.setdefault(t, v)
            nid = {n: i for i, n in enumerate(st.names)}
            for ev in st.chunks(1 << 18, columns=("kind", "tid", "pid", "name", "call_id")):
                tid = np.asarray(ev.tid).astype(np.int64)
                u, first = np.unique(tid, return_index=True)
                for t, pid in zip(u.tolist(), np.asarray(ev.pid)[first].tolist()):
                    pids.setdefault(t, pid)
                user = np.asarray(ev.kind) == KIND["user"]
                name, cid, ts = np.asarray(ev.name), np.asarray(ev.call_id).astype(np.uint64), np.asarray(ev.ts)
                for out, n in ((c1, CALL_BEGIN_MARK), (c21, CALL_END_MARK)):
                    m = user & (name == nid.get(n, -2))
                    out.append((tid[m], cid[m], ts[m].astype(np.int64)))
                m = user & (cid != 0)
                for t in np.unique(tid[m]).tolist():
                    ids.append((t, np.unique(cid[m & (tid == t)])))
        self.threads = threads
        tids = np.array(list(pids), np.int64)
        self.roles = case.roles(types.SimpleNamespace(tid=tids, pid=np.array([pids[t] for t in tids.tolist()]),
                                                      threads=threads))
        own = list(self.roles)

        def cat(parts):
            t, c, x = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, d)
                       for i, d in enumerate((np.int64, np.uint64, np.int64)))
            m = np.isin(t, own)
            return c[m], x[m]

        c1_cid, c1_ts = cat(c1)
        c21_cid, c21_ts = cat(c21)
        # Calls: those with a c1_begin, minus warm-up: rpc-client makes one first call, then
        # `warmup` calls, then the measured ones (rpc/bench.c), in call-sequence order per activity.
        self.excluded = collections.Counter()
        starts = np.unique(c1_cid)
        act, seq = starts >> np.uint64(32), starts & np.uint64(0xFFFFFFFF)
        measured = []
        for a in np.unique(act):
            sq = np.sort(seq[act == a])
            nwarm = 1 + case.warmup
            self.excluded["warm-up (first call and --warmup calls)"] += min(nwarm, len(sq))
            measured.append((a << np.uint64(32)) | sq[nwarm:])
        self.call_ids = np.sort(np.concatenate(measured)) if measured else np.zeros(0, np.uint64)
        all_ids = np.unique(np.concatenate([c for t, c in ids if t in self.roles] or [np.zeros(0, np.uint64)]))
        orphans = np.setdiff1d(all_ids, starts)
        if len(orphans):
            self.excluded["no c1_begin (started before the trace)"] += len(orphans)
        # Every call's time span (warm-up ones too): its first c1_begin .. its last c21_end.
        self._starts = starts
        self.calls = len(starts)
        self._activities = len(np.unique(act))
        b = np.full(len(starts), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(b, starts.searchsorted(c1_cid), c1_ts)
        e = b.copy()
        k = starts.searchsorted(c21_cid)
        ok = (k < len(starts)) & (starts[np.minimum(k, max(len(starts) - 1, 0))] == c21_cid) if len(starts) else \
            np.zeros(len(c21_cid), bool)
        np.maximum.at(e, k[ok], c21_ts[ok])
        self._span_b, self._span_e = b, e

    def windows(self, size):
        """[(first, end) indices into call_ids, lo, hi]: windows of `size` measured calls and the
        time range whose events each must read (None: that end of the trace). The range reaches
        back to the beginning of the calls started just before the window's first (the server's
        sleep before a request began at the end of the previous one) and on to the end of those
        started just after its last (a listener leaves the CPU after the reply is sent)."""
        n = len(self.call_ids)
        if n <= size:
            return [(0, n, None, None)]
        order = np.argsort(self._span_b, kind="stable")
        pos = np.empty(len(order), np.int64)
        pos[order] = np.arange(len(order))
        b_sorted = self._span_b[order]
        e_run = np.maximum.accumulate(self._span_e[order])
        margin = 1 + self._activities
        out = []
        for r0 in range(0, n, size):
            r1 = min(r0 + size, n)
            p = pos[self._starts.searchsorted(self.call_ids[r0:r1])]
            first, last = int(p.min()) - margin, int(p.max()) + margin
            lo = int(b_sorted[first]) if first >= 0 else None
            hi = int(e_run[last]) if last < len(order) else None
            out.append((r0, r1, lo, hi))
        return out


def _reconstruct(case, progress, kernel, window_calls):
    plan = _Plan(case)
    ust_problems = [p for st in case.stored("ust") for p in st.problems]
    problems = [dict(p, trace="ust") for p in ust_problems]
    has_kernel = kernel and case.has_kernel()
    kproblems = [p for st in case.stored("kernel") for p in st.problems] if has_kernel else []
    problems += [dict(p, trace="kernel") for p in kproblems]
    cond = {"client": case.conditions("client"), "server": case.conditions("server")}
    lossy = any(p["what"] in ("discarded_events", "discarded_packets") for p in ust_problems + kproblems)
    if case.lossy or lossy:
        problems.append({"what": "lossy", "message": "events were lost: RPCs with missing events are excluded"})
    # Real hosts (a trace per host): their clocks differ, so one window (the whole capture).
    several = len(case.stored("ust")) > 1 or (has_kernel and len(case.stored("kernel")) > 1)
    if several:
        window_calls = len(plan.call_ids)
    elif not window_calls:
        events = sum(len(st) for st in case.stored("ust")) + \
            (sum(len(st) for st in case.stored("kernel")) if has_kernel else 0)
        window_calls = max(1, int(WINDOW_EVENTS * max(plan.calls, 1) // max(events, 1)))
    plan_windows = plan.windows(window_calls)
    excluded = plan.excluded
    total = len(plan.call_ids)
    if progress:
        progress(0, total)
    parts, windows, inferred, done = [], [], collections.Counter(), 0
    for r0, r1, lo, hi in plan_windows:
        ust = case.span("ust", lo, hi, USER_COLUMNS)
        kev = case.span("kernel", lo, hi, KERNEL_COLUMNS) if has_kernel else None
        part = _build(case, ust, plan.roles, plan.call_ids[r0:r1], kev, cond, excluded, inferred)
        windows.append((done, done + len(part[0]), lo, hi))
        done += len(part[0])
        parts.append(part)
        if progress:
            progress(r1, total)
    call_ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
    rows = _merge_rows([p[1] for p in parts], [w[0] for w in windows], len(call_ids))
    del parts
    _trim()
    roles = plan.roles
    for t, k in sorted(inferred.items()):
        problems.append({"what": "switch_in_inferred", "count": int(k), "trace": "kernel",
                         "message": f"{roles.get(t, 'thread')} thread {t}: {k} switch(es) in not traced (the "
                                    f"kernel did not report leaving the idle task on that CPU); each was taken "
                                    f"at the thread's first kernel event after its waking"})
    threads = {t: {"role": rl, **(plan.threads.get(t) or {})} for t, rl in roles.items()}
    out = CaseRPCs(case, call_ids, rows, excluded, problems, cond, threads, windows, roles, has_kernel)
    for row in rows.values():
        row._owner = out
    return out


def _merge_rows(parts, offsets, n):
    """One Row per name over every window's rows (parts: [{name: Row}], offsets: each window's first
    RPC index). Each window's row is let go of once merged: memory holds the tables plus one row."""
    if len(parts) == 1:
        return parts[0]
    rows = {}
    for name in ROW_ORDER:
        row = rows[name] = Row(name, n)
        pieces = [p.pop(name) for p in parts]
        for a in ("begin", "end", "dur", "count", "status", "why", "_cost", "_tracepoints", "_user_events"):
            setattr(row, a, np.concatenate([getattr(x, a) for x in pieces]))
        for x in pieces:
            row.reasons.update(x.reasons)
        row.occ_r = np.concatenate([x.occ_r + off for x, off in zip(pieces, offsets)])
        row.occ_b, row.occ_e, row.occ_cpu = (np.concatenate([getattr(x, a) for x in pieces])
                                             for a in ("occ_b", "occ_e", "occ_cpu"))
        if any(x.charge_intervals is not None for x in pieces):
            ci = [x.charge_intervals if x.charge_intervals is not None else
                  (x.occ_r, x.occ_cpu, x.occ_b, x.occ_e, np.ones(len(x.occ_r))) for x in pieces]
            row.charge_intervals = (np.concatenate([c[0] + off for c, off in zip(ci, offsets)]),
                                    *(np.concatenate([c[i] for c in ci]) for i in range(1, 5)))
        del pieces
    return rows


def _build(case, ust, roles, call_ids, kev, cond, excluded, inferred):
    """The RPCs call_ids (sorted, measured) from the events of their window: (call ids kept, {name:
    Row}). Calls without their c1_begin or c21_end are left out and counted in excluded; switches
    in that had to be inferred are counted per thread in inferred."""
    tids = np.asarray(ust.tid)
    keep = (np.asarray(ust.kind) == KIND["user"]) & np.isin(tids, list(roles))
    u = ust.select(keep)
    ts = np.asarray(u.ts).astype(np.int64)
    tid = np.asarray(u.tid).astype(np.int64)
    cpu = np.asarray(u.cpu).astype(np.int64)
    cid = _attach_zero_ids(tid, np.asarray(u.call_id).astype(np.uint64))
    uname = np.asarray(u.name)
    marks = [_MARK.get(u.names[i]) for i in range(len(u.names))]
    step_of = np.array([_STEP_INDEX[m[0]] if m else -1 for m in marks] + [-1], np.int64)[uname]
    mark_of = np.array([_MARK_CODE.get(m[1], OTHER) if m else OTHER for m in marks] + [OTHER], np.int64)[uname]

    # The measured calls' marks in call then time order; a call needs a C1 mark and ends with c21_end.
    r = np.minimum(call_ids.searchsorted(cid), max(len(call_ids) - 1, 0))
    on = (call_ids[r] == cid) & (step_of >= 0) if len(call_ids) else np.zeros(len(cid), bool)
    sel = np.nonzero(on)[0]
    sel = sel[np.lexsort((ts[sel], r[sel]))]
    U = _Marks(r[sel], ts[sel], tid[sel], cpu[sel], step_of[sel], mark_of[sel])
    n_all = len(call_ids)
    c1, c21 = U.of(CALL_FIRST), U.of(CALL_LAST)
    first_c1, last_c21 = _first_per(U.r[c1], n_all), _last_per(U.r[c21], n_all)
    ok = (first_c1 >= 0) & (last_c21 >= 0)
    ok[ok] &= U.mark[c21[last_c21[ok]]] == END
    if (~ok).any():
        excluded["incomplete user marks (no c1_begin or c21_end)"] += int((~ok).sum())
        renum = np.cumsum(ok) - 1
        m = ok[U.r]
        U = _Marks(renum[U.r[m]], U.ts[m], U.tid[m], U.cpu[m], U.step[m], U.mark[m])
        call_ids = call_ids[ok]
        c1, c21 = U.of(CALL_FIRST), U.of(CALL_LAST)
    n = len(call_ids)
    first_c1, last_c21 = _first_per(U.r[c1], n), _last_per(U.r[c21], n)

    rows = {name: Row(name, n) for name in ROW_ORDER}
    for name in ROW_ORDER:
        side, base, _ = EXTRA_ROWS.get(name, (None, name, None))
        side = side or _STEP[name]["side"]
        if base and not applicable(base, cond[side]):
            rows[name].status[:] = NOT_APPLICABLE

    # Per-thread user timestamps (to tell whether a thread slept between two marks).
    user_ts_of = {t: ts[tid == t] for t in roles}
    K = _Kernel(kev) if kev is not None and len(kev) else None
    ctx = _Ctx(n, rows, U, K, cond, user_ts_of)

    _user_steps(ctx)
    # The spans of user marks but the call's: a send's (its marks not found) and the client's wait (no
    # such marks: the reply was there before the client waited).
    waits_user = None
    for name, sp in SPANS.items():
        if sp["kind"] == "call":
            continue
        occ = _span(ctx, *span_steps(name, cond[sp["side"]]))
        _put(ctx, name, *_or_reason(ctx, occ, NOT_TAKEN_REPLY if sp["kind"] == "wait" else "user marks not found"))
        if sp["kind"] == "wait":
            waits_user = occ

    client_tid = U.tid[c1[first_c1]]
    waits_kernel = None
    if K is None:
        kernel_steps = [s["id"] for s in STEPS if not (len(s["user_events"]) >= 2 and
                        not any(c in cond[s["side"]] for c in s["absent_marks"]))]
        for name in kernel_steps + list(SPLIT):
            _put(ctx, name, fail=_reasons(n, "no kernel trace"))
    else:
        waits_kernel = _client_kernel(ctx, client_tid)
        _server_kernel(ctx)

    _rtt(ctx, U.ts[c1[first_c1]], U.ts[c21[last_c21]], U.cpu[c21[last_c21]], waits_kernel, waits_user)
    # A step that applies but whose events were not found by any rule: missing, "events not found".
    for row in rows.values():
        m = (row.status == MISSING) & _is_none(row.why)
        if m.any():
            row.reasons["events not found"] += int(m.sum())
            row.why[m] = "events not found"
    if K is not None:
        inferred.update(K.inferred)
    return call_ids, rows
