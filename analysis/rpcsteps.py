"""The rules that put each step of every RPC of a case (analysis/rpcs.py _build calls them): user marks,
the kernel events that bound the send, wait and receive steps, the wake-ups and sleeps, the RTT.
"""
import collections
import types

import numpy as np

from rpcscope.tracepoints import SPANS, STEPS, side_step, span_of, span_steps, split_of, with_role

from .rpckernel import _first_fail, _first_per, _last_per, _seek
from .rpcrows import CALL_ROW, MEASURED, MISSING, NOT_APPLICABLE

# ---------------------------------------------------------------- reconstruction
#
# Every rule works on all the RPCs of a case at once: a step's occurrences are arrays (RPC index,
# begin, end, CPU) in RPC then time order, and the kernel events that bound them are found with one
# sorted search per thread (_Kernel.find) instead of one per RPC.

BEGIN, END, OTHER = 0, 1, 2
_MARK_CODE = {"begin": BEGIN, "end": END}
_STEP_INDEX = {s["id"]: i for i, s in enumerate(STEPS)}
# The steps of each side by their role (the catalog's `role`): what each rule below bounds.
_ROLE = {side: {role: side_step(side, role) for role in ("send_in", "sendmsg", "send_out", "sleep", "softirq",
                                                         "wake", "select", "recv")}
         for side in ("client", "server")}


class _Marks:
    """The user marks of the measured RPCs, in RPC then time order."""

    def __init__(self, r, ts, tid, cpu, step, mark):
        self.r, self.ts, self.tid, self.cpu, self.step, self.mark = r, ts, tid, cpu, step, mark
        # The positions of each step's marks, in order: one stable sort instead of a scan per question.
        order = np.argsort(step, kind="stable")
        bounds = np.searchsorted(step[order], np.arange(len(STEPS) + 1))
        self._of = [order[bounds[i]:bounds[i + 1]] for i in range(len(STEPS))]

    def of(self, step, mark=None):
        """Positions of a step's marks (mark None: all of them)."""
        p = self._of[_STEP_INDEX[step]]
        return p if mark is None else p[self.mark[p] == mark]


class _Ctx:
    def __init__(self, n, rows, marks, K, cond, user_ts_of):
        self.n, self.rows, self.U, self.K, self.cond, self.user_ts_of = n, rows, marks, K, cond, user_ts_of


def _is_none(a):
    return np.equal(np.asarray(a, object), None).astype(bool) if len(a) else np.zeros(0, bool)


def _reasons(n, reason, where=None):
    """Per RPC: reason where `where` (default: every RPC), else None."""
    out = np.full(n, None, object)
    out[slice(None) if where is None else where] = reason
    return out


def _put(ctx, name, occ=None, fail=None):
    """Record a step for every RPC. occ: (r, begin, end, cpu[, begin cpu]) arrays of its occurrences in
    RPC then time order; fail: per RPC the reason it is missing (None: none). An RPC with a reason is
    MISSING with it, one with occurrences MEASURED, one with neither stays MISSING (settled at the end).
    Rows the run's conditions rule out are left alone. An occurrence is charged the events recorded on
    its cpu in [begin, end) (rpcrows.py); with a begin cpu, where that is another CPU, also the event
    that begins it there (a wake-up: the waking, on the waker's CPU, whose recording delays the wake)."""
    row, n = ctx.rows[name], ctx.n
    skip = row.status == NOT_APPLICABLE
    if fail is not None:
        m = ~_is_none(fail) & ~skip
        row.status[m] = MISSING
        row.why[m] = fail[m]
        row.reasons.update(fail[m].tolist())
        skip = skip | m
    if occ is None or not len(occ[0]):
        return
    keep = ~skip[np.asarray(occ[0], np.int64)]
    r, b, e, c, *bc = (np.asarray(a, np.int64)[keep] for a in occ)
    cnt = np.bincount(r, minlength=n)
    has = cnt > 0
    row.dur[has] = np.bincount(r, (e - b).astype(float), minlength=n)[has]
    row.count[has] = cnt[has]
    row.begin[has] = b[_first_per(r, n)[has]]
    row.end[has] = e[_last_per(r, n)[has]]
    row.status[has] = MEASURED
    row.occ_r, row.occ_b, row.occ_e, row.occ_cpu = r, b, e, c
    if bc:
        o = (bc[0] != c) & (bc[0] >= 0)
        row.charge_intervals = (np.concatenate([r, r[o]]), np.concatenate([c, bc[0][o]]),
                                np.concatenate([b, b[o]]), np.concatenate([e, b[o] + 1]),
                                np.ones(len(r) + int(o.sum())))


def _sub(occ, m):
    return tuple(np.asarray(a)[m] for a in occ)


def _or_reason(ctx, occ, reason):
    """(occ, fail): the reason for the RPCs without an occurrence."""
    return occ, _reasons(ctx.n, reason, np.bincount(occ[0], minlength=ctx.n)[:ctx.n] == 0)


def _user_steps(ctx):
    """Steps with a begin and an end user mark (see the module docstring)."""
    U, n = ctx.U, ctx.n
    for s in STEPS:
        ue = [e.split("_", 1)[1] for e in s["user_events"]]
        if len(ue) < 2:
            continue
        absent = {m.split("_", 1)[1] for c, ms in s["absent_marks"].items() if c in ctx.cond[s["side"]] for m in ms}
        if ue[0] in absent:
            continue            # begins at a kernel mark: done with the kernel steps
        first, last = _MARK_CODE[ue[0]], _MARK_CODE[ue[-1]]
        if s["per"] == "call":
            pb, pe = U.of(s["id"], first), U.of(s["id"], last)
            fb, le = _first_per(U.r[pb], n), _last_per(U.r[pe], n)
            r = np.nonzero((fb >= 0) & (le >= 0))[0]
            ib, ie = pb[fb[r]], pe[le[r]]
            good = U.ts[ie] >= U.ts[ib]
            occ = (r[good], U.ts[ib][good], U.ts[ie][good], U.cpu[ie][good])
        else:
            # One occurrence per begin mark directly followed (among the step's begin and end marks)
            # by an end mark of the same call.
            p = U.of(s["id"])
            p = p[(U.mark[p] == first) | (U.mark[p] == last)]
            pair = (U.mark[p[:-1]] == first) & (U.mark[p[1:]] == last) & (U.r[p[:-1]] == U.r[p[1:]])
            ib, ie = p[:-1][pair], p[1:][pair]
            occ = (U.r[ie], U.ts[ib], U.ts[ie], U.cpu[ie])
        _put(ctx, s["id"], *_or_reason(ctx, occ, "user marks not found"))


def _span(ctx, first_step, last_step):
    """Occurrences from each begin mark to the next end mark of the same call (user marks alone)."""
    qr, b, _, e, ecpu, found = _to_next_end(ctx, first_step, last_step)
    return _sub((qr, b, e, ecpu), found)


def _to_next_end(ctx, first_step, last_step):
    """Every begin mark of first_step with the next end mark of last_step in its call: (r, begin
    ts, thread, end ts, end cpu, found)."""
    U = ctx.U
    pb, pe = U.of(first_step, BEGIN), U.of(last_step, END)
    j = _seek(U.r[pb], U.ts[pb], U.r[pe], U.ts[pe], "first")
    je = pe[np.maximum(j, 0)] if len(pe) else np.zeros(len(j), np.int64)
    return U.r[pb], U.ts[pb], U.tid[pb], np.where(j >= 0, U.ts[je] if len(pe) else 0, 0), \
        np.where(j >= 0, U.cpu[je] if len(pe) else 0, 0), j >= 0


def _sends(ctx, side):
    """The send syscalls inside a side's user marks around a send (its steps of roles send_in ..
    send_out): the three steps around and in the syscall (send_in, sendmsg, send_out) and the split
    of the syscall at its first device hand-off (the catalog's [split] of the sendmsg step)."""
    K, n = ctx.K, ctx.n
    R = _ROLE[side]
    k_first, k_mid, k_last, split = R["send_in"], R["sendmsg"], R["send_out"], split_of(R["sendmsg"])
    qr, b, th, e, _, found = _to_next_end(ctx, k_first, k_last)
    en = K.find("send_enter", "first", th, b, e)
    ex = K.find("send_exit", "last", th, b, e)
    sys_ok = en.found & ex.found & (ex.ts >= en.ts)
    reason = np.full(len(qr), None, object)
    reason[~sys_ok] = "send syscall not found"
    reason[~found] = "user marks not found"
    fail, _ = _first_fail(qr, reason, n)
    fail[_first_per(qr, n) < 0] = "user marks not found"
    x = K.find("xmit", "first", th, en.ts, ex.ts)
    cpu = K.cpu[en.idx]
    good = sys_ok & found
    _put(ctx, k_first, _sub((qr, b, en.ts, cpu), good), fail)
    _put(ctx, k_mid, _sub((qr, en.ts, ex.ts, cpu), good), fail)
    _put(ctx, k_last, _sub((qr, ex.ts, e, cpu), good), fail)
    no_x = np.bincount(qr[good & ~x.found], minlength=n)[:n] > 0
    fail_split = fail.copy()
    fail_split[_is_none(fail) & no_x] = "no net_dev_xmit inside the send"
    _put(ctx, split[0], _sub((qr, en.ts, x.ts, cpu), good & x.found), fail_split)
    _put(ctx, split[1], _sub((qr, x.ts, ex.ts, cpu), good & x.found), fail_split)


NET_RX_MAX_NS = 2_000_000


def _wake(K, th, lo, hi):
    """Per query (thread th, interval [lo, hi]): the thread's sleep in it: out, waking, in (_Hit)
    and the entry of the NET_RX softirq the waking ran in (sirq), or a reason.

    Some kernels do not fire sched_switch when a CPU leaves its idle task (on this VM: never on
    CPU 1, neither for perf nor for ftrace). The switch in is then inferred at the thread's first
    kernel event after the waking (its return from the wait syscall), as the execution graph does
    (graph.Graph.last_in); w.inferred says where."""
    w = types.SimpleNamespace()
    th, lo, hi = (np.asarray(a, np.int64) for a in (th, lo, hi))
    w.out = K.find("out", "first", th, lo, hi)
    w.wk = K.find("waking", "last", th, w.out.ts, hi)
    # A wake-up that raced the going to sleep (graph.Graph.waking_while_going_to_sleep): no waking
    # after the switch out, one between the thread's last event before it and the switch out.
    m = np.nonzero(~w.wk.found & w.out.found)[0]
    if len(m):
        prev = K.find("any", "last", th[m], lo[m], w.out.ts[m] - 1)
        since = np.where(prev.found, prev.ts + 1, lo[m])
        early = K.find("waking", "last", th[m], since, w.out.ts[m])
        ok = early.found
        w.wk.ts[m[ok]], w.wk.idx[m[ok]] = early.ts[ok], early.idx[ok]
    w.sw_in = K.find("in", "first", th, w.wk.ts, hi)
    anyev = K.find("any", "first", th, w.wk.ts, hi)
    w.inferred = ~w.sw_in.found & anyev.found & w.wk.found & w.out.found
    w.sw_in.ts[w.inferred], w.sw_in.idx[w.inferred] = anyev.ts[w.inferred], anyev.idx[w.inferred]
    w.reason = np.full(len(th), None, object)
    w.reason[~w.sw_in.found] = "switch back in not found"
    w.reason[~w.wk.found] = "sched_waking not found"
    w.reason[~w.out.found] = "did not sleep"
    # The softirq the waking ran in. It may have begun before the switch out (a TCP reply's first
    # segment delivered while the client was still on its way to sleep, its second waking it), even
    # before the sleeper's previous user event; a NET_RX softirq runs at most netdev_budget_usecs
    # (2 ms by default).
    w.sirq = K.softirq_around(K.cpu[w.wk.idx], w.wk.ts - NET_RX_MAX_NS, w.wk.ts)
    return w


def _sleeps(ctx, qr, th, lo, hi, unmarked, unmarked_reason, none_reason, absent=(), none_absent=False):
    """_wake for queries in RPC order; an RPC stops at its first failure (a query `unmarked` fails with
    unmarked_reason). A query whose reason is in `absent` is a wait that did not happen (w.absent): no
    occurrence and no failure. An RPC whose every query is absent, or (none_absent) that has no query,
    waited nowhere: w.no_wait, without a failure (the message was always there already); with no
    `absent` reasons no RPC is, and one without a query fails with none_reason. Returns (w, per-RPC reason,
    mask of the queries before their RPC's failure); w.resume and w.softirq are the occurrences of
    the good queries."""
    K = ctx.K
    w = _wake(K, th, lo, hi)
    w.reason[unmarked] = unmarked_reason
    w.absent = np.array([x in absent for x in w.reason], bool) if len(qr) else np.zeros(0, bool)
    counted = w.reason.copy()
    counted[w.absent] = None
    fail, before = _first_fail(qr, counted, ctx.n)
    first = _first_per(qr, ctx.n)
    none_good = np.bincount(qr[~w.absent], minlength=ctx.n)[:ctx.n] == 0
    # Without `absent` reasons no query is absent: an RPC without one fails with none_reason.
    w.no_wait = none_good & _is_none(fail) & ((first >= 0) | none_absent) if absent else np.zeros(ctx.n, bool)
    fail[(first < 0) & ~w.no_wait] = none_reason
    for t, k in collections.Counter(th[w.inferred & before].tolist()).items():
        K.inferred[t] += k
    w.good = _is_none(w.reason)
    w.resume = _sub((qr, w.wk.ts, w.sw_in.ts, K.cpu[w.sw_in.idx], K.cpu[w.wk.idx]), w.good)
    w.softirq = _sub((qr, w.sirq.ts, w.wk.ts, K.cpu[w.wk.idx]), w.good & w.sirq.found)
    return w, fail, before


def _client_kernel(ctx, client_tid):
    """The client's send (C7-C9) and its waits (C14-C18, the span of kind wait); returns its sleeps (r,
    out, waking) for the RTT charge."""
    K, R = ctx.K, _ROLE["client"]
    _sends(ctx, "client")
    recv = "recv_wait" in ctx.cond["client"]
    wait = span_of("wait", "client")
    qr, b, _, e, ecpu, found = _to_next_end(ctx, *span_steps(wait, ctx.cond["client"]))
    th = client_tid[qr]
    # A reply that came before the client waited for it (there at the non-blocking select, or as the
    # client entered its blocking wait, which returned at once) was not waited for: no C14-C16 for
    # it, and a call that waited for no reply is whole (its wait steps do not apply to it). With
    # --wait recv C18 begins at the switch back in, which such a call has not: it still fails.
    w, fail, before = _sleeps(ctx, qr, th, b, e, ~found, "user marks not found", NOT_TAKEN_REPLY,
                              absent=() if recv else ("did not sleep",), none_absent=True)
    good = w.good
    occ = {R["sleep"]: _sub((qr, b, w.out.ts, K.cpu[w.out.idx]), good), R["wake"]: w.resume,
           R["softirq"]: w.softirq}
    if recv:
        occ[R["recv"]] = _sub((qr, w.sw_in.ts, e, ecpu), good)
        occ[R["select"]] = (np.zeros(0, np.int64),) * 4
        _put_waits(ctx, [R[x] for x in ("sleep", "softirq", "wake", "select", "recv")], occ, qr, fail)
    else:
        # The select step (the return from the blocking wait) also when it returned without sleeping.
        slept = good | (w.absent & found)
        ex = K.find("epoll_exit", "last", th, np.where(good, w.sw_in.ts, b), e)
        occ[R["select"]] = _sub((qr, ex.ts, e, ecpu), slept & ex.found)
        _put_waits(ctx, [R[x] for x in ("sleep", "softirq", "wake")], occ, qr, fail, ~w.absent)
        _put_waits(ctx, [R["select"]], occ, qr, fail, slept)
        _did_not_occur(ctx, [R[x] for x in ("sleep", "softirq", "wake", "select")] + [wait], w.no_wait,
                       "the reply was there before the client waited")
    return _sub((qr, w.out.ts, np.maximum(w.out.ts, w.wk.ts)), good & before)


NOT_TAKEN_REPLY = "not taken (the reply was there at the non-blocking select)"


def _did_not_occur(ctx, names, mask, why):
    """Rows of a wait that did not happen in the RPCs of mask (the message it would wait for was there
    already): not applicable to those RPCs, unless they failed or the row has an occurrence there."""
    for name in names:
        row = ctx.rows[name]
        m = mask & (row.status == MISSING) & (_is_none(row.why) | (row.why == NOT_TAKEN_REPLY)) & (row.count == 0)
        row.reasons.subtract(row.why[m & ~_is_none(row.why)].tolist())
        row.reasons += collections.Counter()        # drops the reasons no RPC has any more
        row.status[m] = NOT_APPLICABLE
        row.why[m] = why


_WAIT_NOT_FOUND = {**{sid: "NET_RX softirq not found" for sid in with_role("softirq")},
                   **{sid: "epoll exit not found" for sid in with_role("select")}}


def _put_waits(ctx, names, occ, qr, fail, expected_mask=None):
    """Record the wait steps of one side: the shared reason of an RPC, a per-step reason where an
    occurrence is missing (not every wait found its kernel marks), or the occurrences. expected_mask:
    the queries that should have one (default: all)."""
    expected = np.bincount(qr if expected_mask is None else qr[expected_mask], minlength=ctx.n)[:ctx.n]
    for name in names:
        got = np.bincount(occ[name][0], minlength=ctx.n)[:ctx.n]
        f = fail.copy()
        f[_is_none(fail) & (got != expected)] = _WAIT_NOT_FOUND.get(name, "events not found")
        _put(ctx, name, occ[name], f)


def _server_kernel(ctx):
    K, U, n, R = ctx.K, ctx.U, ctx.n, _ROLE["server"]
    _sends(ctx, "server")
    recv = "recv_wait" in ctx.cond["server"]
    # Fragments received: each s4_end (recv), woken before its s3_end (select; or s4_end with --wait recv).
    p4 = U.of(R["recv"], END)
    qr, th, t4, c4 = U.r[p4], U.tid[p4], U.ts[p4], U.cpu[p4]
    if recv:
        mts, mcpu, has_mark = t4, c4, np.ones(len(p4), bool)
    else:
        # The last s3_end of the call on the same thread at or before the s4_end.
        p3 = U.of(R["select"], END)
        tix = {t: i for i, t in enumerate(ctx.user_ts_of)}
        nt = len(tix) + 1
        g3 = U.r[p3] * nt + np.array([tix.get(t, nt - 1) for t in U.tid[p3].tolist()], np.int64)
        o = np.lexsort((U.ts[p3], g3))
        p3, g3 = p3[o], g3[o]
        g4 = qr * nt + np.array([tix.get(t, nt - 1) for t in th.tolist()], np.int64)
        j = _seek(g4, t4, g3, U.ts[p3], "last")
        has_mark = j >= 0
        jm = p3[np.maximum(j, 0)] if len(p3) else np.zeros(len(j), np.int64)
        mts = np.where(has_mark, U.ts[jm] if len(p3) else 0, 0)
        mcpu = np.where(has_mark, U.cpu[jm] if len(p3) else 0, 0)
    # The sleep between the thread's previous user event and the mark.
    prev = np.zeros(len(p4), np.int64)
    for t in np.unique(th).tolist():
        m = np.nonzero(th == t)[0]
        uts = ctx.user_ts_of[t]
        k = uts.searchsorted(mts[m], "left") - 1
        prev[m] = np.where(k >= 0, uts[np.maximum(k, 0)] if len(uts) else 0, 0)
    # A fragment of a multi-fragment request that came while the listener took the one before (it
    # was there at the non-blocking select, or came as the listener entered its blocking wait, which
    # returned at once) was not waited for: that fragment has no S1/S2, and the call is complete.
    # With --wait recv S4 begins at the switch back in, which such a fragment has not: it still fails.
    not_taken = "not taken (the request was there at the non-blocking select)"
    w, fail, _ = _sleeps(ctx, qr, th, prev, mts, ~has_mark, not_taken, "user marks not found",
                         absent=() if recv else ("did not sleep", not_taken))
    good = w.good
    occ = {R["wake"]: w.resume, R["softirq"]: w.softirq}
    if recv:
        occ[R["recv"]] = _sub((qr, w.sw_in.ts, t4, c4), good)
        _put_waits(ctx, [R[x] for x in ("softirq", "wake", "recv")], occ, qr, fail)
    else:
        # The select step (the return from the blocking wait) also when it returned without sleeping.
        slept = good | (w.absent & has_mark)
        ex = K.find("epoll_exit", "last", th, np.where(good, w.sw_in.ts, prev), mts)
        occ[R["select"]] = _sub((qr, ex.ts, mts, mcpu), slept & ex.found)
        _put_waits(ctx, [R[x] for x in ("softirq", "wake")], occ, qr, fail, ~w.absent)
        _put_waits(ctx, [R["select"]], occ, qr, fail, slept)
        _did_not_occur(ctx, [R[x] for x in ("softirq", "wake", "select")], w.no_wait,
                       "the request was there before the listener waited")

    # The sleep step (S14): its begin mark -> the listener's switch out before its next user event.
    p14 = U.of(R["sleep"], BEGIN)
    qr, th, b = U.r[p14], U.tid[p14], U.ts[p14]
    nxt = np.full(len(p14), np.iinfo(np.int64).max, np.int64)
    for t in np.unique(th).tolist():
        m = np.nonzero(th == t)[0]
        uts = ctx.user_ts_of[t]
        k = uts.searchsorted(b[m], "right")
        nxt[m] = np.where(k < len(uts), uts[np.minimum(k, len(uts) - 1)], nxt[m])
    out = K.find("out", "first", th, b, nxt)
    # A blocking wait that returned at once (a fragment came as the listener entered it) ends at its
    # return: S14 without the idle part.
    ex = K.find("epoll_exit", "first", th, b, nxt)
    end = np.where(out.found, out.ts, ex.ts)
    end_idx = np.where(out.found, out.idx, ex.idx)
    found = out.found | ex.found
    fail, _ = _first_fail(qr, np.where(found, None, "did not sleep").astype(object), n)
    _put(ctx, R["sleep"], _sub((qr, b, end, K.cpu[end_idx]), found), fail)
    # No begin mark: the next request was there at the non-blocking select, the listener did not wait.
    _did_not_occur(ctx, [R["sleep"]], _first_per(qr, n) < 0, "the next request was there before the listener waited")
    # The transmit-complete interrupts (a real NIC's; role tx_irq): not reconstructed yet.
    for name in with_role("tx_irq"):
        _put(ctx, name, fail=_reasons(n, "transmit interrupt not reconstructed yet"))


def _rtt(ctx, rtt_b, rtt_e, ccpu, waits_kernel, waits_user):
    """The RTT row (c1 .. c21_end) and its probe charge: the client's CPU over the call, except
    while the client waits, where the server's CPU is charged instead (one CPU: the same thing)."""
    U, n = ctx.U, ctx.n
    row = ctx.rows[CALL_ROW]
    row.begin[:], row.end[:], row.dur[:] = rtt_b, rtt_e, (rtt_e - rtt_b).astype(float)
    row.count[:], row.status[:] = 1, MEASURED
    r = np.arange(n)
    row.occ_r, row.occ_b, row.occ_e, row.occ_cpu = r, rtt_b, rtt_e, ccpu
    scpu = np.full(n, -1, np.int64)
    for step in reversed(SPANS[CALL_ROW]["server_cpu"]):     # the first the call has wins
        p = U.of(step)
        f = _first_per(U.r[p], n)
        scpu[f >= 0] = U.cpu[p[f[f >= 0]]]
    # The client's sleeps found in the kernel trace, else its waits from user marks.
    wr, wb, we = waits_user[:3]
    if waits_kernel is not None:
        has_k = np.bincount(waits_kernel[0], minlength=n)[:n] > 0
        m = ~has_k[wr]
        wr, wb, we = (np.concatenate([k, u[m]]) for k, u in zip(waits_kernel, (wr, wb, we)))
    two = (scpu[wr] >= 0) & (scpu[wr] != ccpu[wr])
    wr, wb, we = wr[two], wb[two], we[two]
    ones = np.ones(n)
    row.charge_intervals = (np.concatenate([r, wr, wr]), np.concatenate([ccpu, ccpu[wr], scpu[wr]]),
                  np.concatenate([rtt_b, wb, wb]), np.concatenate([rtt_e, we, we]),
                  np.concatenate([ones, -np.ones(len(wr)), np.ones(len(wr))]))
