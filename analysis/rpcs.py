"""Per-RPC reconstruction: for each call of a case and each catalog step, when
it began, when it ended, how long it took, or why it has no duration.

    from rpcscope.analysis.run import load_run
    from rpcscope.analysis.rpcs import reconstruct
    r = reconstruct(load_run("runs/x").cases[0])
    r.rows["C8"].dur          # ns per RPC (NaN where not measured), r.call_ids the RPCs
    r.rows["C8"].status       # MEASURED / NOT_APPLICABLE / MISSING per RPC
    r.rows["C8"].reasons      # Counter of why it is missing
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
    C15 NET_RX softirq_entry (last one on the CPU of the waking, after the switch
        out) -> sched_waking of the client; C16 waking -> sched_switch back in
    C17 sys_exit_epoll_wait -> c17_end
    S1/S2 as C15/C16 for the listener, before s3_end (s4_end with --wait recv);
    S3 sys_exit_epoll_wait -> s3_end; S14 s14_begin -> sched_switch out.
  With --wait recv the absent begin marks of C18/S4 are the switch back in.
* A step the run's conditions rule out (transport, inline server, veth link,
  single window, waiting mode, one-way procedure) is NOT_APPLICABLE for every
  RPC. A step that applies but whose events are not there is MISSING for that RPC,
  with a reason (no kernel trace, the thread did not sleep, an event not found).
* Extra rows: C8', C8'', S9', S9'' (the sendmsg split), and spans from user
  marks alone, which need no kernel trace: "C7-C9" (c7_begin..c9_end), "S8-S10",
  "C14-C17" (c14_begin..c17_end, or ..c18_end with --wait recv: the client's
  whole wait), "RTT" (c1_begin..c21_end).
* Probe cost ("corrected"): each tracepoint is charged to the interval that
  follows its timestamp. A step occurrence [begin, end) on CPU c is charged the
  calibrated cost of every user and kernel event recorded on c with begin <= ts
  < end (c: the CPU of the occurrence's end event); the corrected duration is the
  raw one minus that. The RTT's charge: events on the client's CPU during the
  call, except while the client waits (switch out .. waking), plus events on the
  server's CPU during those waits (one CPU: the same thing). Calibration costs
  that are null (too rare to measure) count 0, negative ones (noise) count 0.
"""
import collections

import numpy as np

from rpcscope.tracepoints import EVENTS, STEPS, applicable

from .traceread import KIND

MEASURED, NOT_APPLICABLE, MISSING = 0, 1, 2

SEND_SYSCALLS = {"sendto", "sendmsg", "write", "writev"}
RECV_SYSCALLS = {"recvfrom", "recvmsg", "read"}
EPOLL_SYSCALLS = {"epoll_wait", "epoll_pwait"}

EXTRA_ROWS = {
    "C8'": ("client", "C8", "sendmsg' (to the first device hand-off)"),
    "C8''": ("client", "C8", "sendmsg'' (after the hand-off; on veth it holds the receiver's protocol input)"),
    "S9'": ("server", "S9", "sendmsg' (to the first device hand-off)"),
    "S9''": ("server", "S9", "sendmsg'' (after the hand-off)"),
    "C7-C9": ("client", None, "packet send from user marks (c7_begin .. c9_end)"),
    "S8-S10": ("server", "S8", "packet send from user marks (s8_begin .. s10_end)"),
    "C14-C17": ("client", "C14", "the client's wait from user marks (c14_begin .. c17_end)"),
    "RTT": ("client", None, "traced round trip (c1_begin .. c21_end)"),
}
ROW_ORDER = [s["id"] for s in STEPS if s["side"] == "client"] + ["C8'", "C8''", "C7-C9", "C14-C17"] + \
    [s["id"] for s in STEPS if s["side"] == "server"] + ["S9'", "S9''", "S8-S10", "RTT"]

_STEP = {s["id"]: s for s in STEPS}
# event name (without provider) -> (step id, mark)
_MARK = {e["name"].split(":", 1)[1]: (e["step"], e["mark"]) for e in EVENTS}

_PERF_NAME = {
    "net_queue": "net:net_dev_queue", "net_start_xmit": "net:net_dev_start_xmit", "net_xmit": "net:net_dev_xmit",
    "net_receive": "net:netif_receive_skb", "net_rx": "net:netif_rx", "softirq_entry": "irq:softirq_entry",
    "softirq_exit": "irq:softirq_exit", "softirq_raise": "irq:softirq_raise", "irq_entry": "irq:irq_handler_entry",
    "irq_exit": "irq:irq_handler_exit", "sched_waking": "sched:sched_waking", "sched_wakeup": "sched:sched_wakeup",
    "sched_switch": "sched:sched_switch", "copy_to_user": "skb:skb_copy_datagram_iovec",
}


class Row:
    """One step (or extra row) over the RPCs of a case."""

    def __init__(self, name, n):
        self.name = name
        self.begin = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.dur = np.full(n, np.nan)
        self.cost = np.zeros(n)
        self.tracepoints = np.zeros(n, np.int32)
        self.count = np.zeros(n, np.int32)
        self.status = np.full(n, MISSING, np.int8)
        self.reasons = collections.Counter()
        self.why = np.full(n, None, object)      # per RPC: why the step is missing
        self.occ = np.full(n, None, object)      # per RPC: [(begin, end, cpu)] (reconstruct(occurrences=True))

    @property
    def corrected(self):
        return self.dur - self.cost


def incomplete(rpcs):
    """(mask of RPCs with every applicable catalog step measured, Counter of why the
    others are not: the first missing step in catalog order and its reason)."""
    ok = np.ones(len(rpcs), bool)
    why = collections.Counter()
    for s in STEPS:
        row = rpcs.rows[s["id"]]
        m = ok & (row.status == MISSING)
        for w in row.why[m]:
            why[f"{s['id']}: {w}"] += 1
        ok &= row.status != MISSING
    return ok, why


class CaseRPCs:
    """The RPCs of one case: call ids and one Row per step."""

    def __init__(self, case, call_ids, rows, excluded, problems, conditions, threads):
        self.case = case
        self.call_ids = call_ids
        self.rows = rows
        self.excluded = excluded
        self.problems = problems
        self.conditions = conditions
        self.threads = threads

    def __len__(self):
        return len(self.call_ids)


# ---------------------------------------------------------------- helpers

def _first_in(a, lo, hi):
    """Index into a (sorted) of the first value in [lo, hi], or -1."""
    i = int(a.searchsorted(lo, "left"))
    return i if i < len(a) and a[i] <= hi else -1


def _last_in(a, lo, hi):
    """Index into a (sorted) of the last value in [lo, hi], or -1."""
    i = int(a.searchsorted(hi, "right")) - 1
    return i if i >= 0 and a[i] >= lo else -1


class _Sel:
    """Sorted timestamps of some kernel events, with their global indices."""

    def __init__(self, ev, m):
        self.idx = np.nonzero(m)[0]
        self.ts = np.asarray(ev.ts)[self.idx]

    def first(self, lo, hi):
        i = _first_in(self.ts, lo, hi)
        return (int(self.ts[i]), int(self.idx[i])) if i >= 0 else None

    def last(self, lo, hi):
        i = _last_in(self.ts, lo, hi)
        return (int(self.ts[i]), int(self.idx[i])) if i >= 0 else None


def _names_mask(ev, kind, names):
    ids = [ev.name_id(n) for n in names]
    ids = [i for i in ids if i >= 0]
    return (np.asarray(ev.kind) == KIND[kind]) & np.isin(np.asarray(ev.name), ids)


class _Kernel:
    """Kernel events indexed by thread (lazily) and NET_RX softirqs by CPU."""

    def __init__(self, ev):
        self.ev = ev
        self.cpu = np.asarray(ev.cpu)
        kind, tid, tid2 = np.asarray(ev.kind), np.asarray(ev.tid), np.asarray(ev.tid2)
        self._tid, self._tid2, self._kind = tid, tid2, kind
        self.m_send_enter = _names_mask(ev, "syscall_entry", SEND_SYSCALLS)
        self.m_send_exit = _names_mask(ev, "syscall_exit", SEND_SYSCALLS)
        self.m_epoll_exit = _names_mask(ev, "syscall_exit", EPOLL_SYSCALLS)
        self.m_wait_enter = _names_mask(ev, "syscall_entry", EPOLL_SYSCALLS | RECV_SYSCALLS)
        self.softirq = {}
        sirq = (kind == KIND["softirq_entry"]) & (np.asarray(ev.vec) == 3)
        for c in np.unique(self.cpu[sirq]):
            self.softirq[int(c)] = _Sel(ev, sirq & (self.cpu == c))
        self._threads = {}
        self.inferred = collections.Counter()     # tid -> switches in inferred (see _wake)

    def thread(self, t):
        k = self._threads.get(t)
        if k is None:
            on = self._tid == t
            k = self._threads[t] = {
                "send_enter": _Sel(self.ev, on & self.m_send_enter),
                "send_exit": _Sel(self.ev, on & self.m_send_exit),
                "xmit": _Sel(self.ev, on & (self._kind == KIND["net_xmit"])),
                "epoll_exit": _Sel(self.ev, on & self.m_epoll_exit),
                "wait_enter": _Sel(self.ev, on & self.m_wait_enter),
                "out": _Sel(self.ev, on & (self._kind == KIND["sched_switch"]) & (self._tid2 != t)),
                "in": _Sel(self.ev, (self._kind == KIND["sched_switch"]) & (self._tid2 == t) & ~on),
                "waking": _Sel(self.ev, (self._kind == KIND["sched_waking"]) & (self._tid2 == t)),
                "any": _Sel(self.ev, on & (self._kind != KIND["sched_switch"])),
            }
        return k


# Probe classes (analysis/probe.py calibrates one cost per class where the calls run): user events,
# kernel network-device events (one per packet per device), the other kernel events (syscalls,
# scheduler, softirq, copies).
CLASS_UST, CLASS_NET, CLASS_OTHER = 0, 1, 2
N_CLASSES = 3
NET_KINDS = [KIND[k] for k in ("net_queue", "net_start_xmit", "net_xmit", "net_receive", "net_rx")]


class _Costs:
    """Cumulative probe cost of the events recorded on each CPU."""

    def __init__(self, case, ust, uroles, kernel):
        cal = {r: case.calibration(r) for r in ("client", "server")}
        self.available = any(c.get("ust_event_ns") is not None for c in cal.values())
        cpu_role = {}
        for name, h in case.run.hosts.items():
            for c in h.get("cpus") or []:
                cpu_role.setdefault(int(c), h.get("role"))
        parts = []
        if len(ust):
            ucost = {r: max(0.0, float(cal[r].get("ust_event_ns") or 0.0)) for r in cal}
            costs = np.array([ucost.get(r, 0.0) for r in uroles])
            parts.append((np.asarray(ust.ts), np.asarray(ust.cpu), costs, np.full(len(ust), CLASS_UST)))
        if kernel is not None and len(kernel):
            kc = np.zeros(len(kernel))
            kind = np.asarray(kernel.kind)
            names = np.asarray(kernel.name)
            kcpu = np.asarray(kernel.cpu)
            for role in ("client", "server"):
                kev = cal[role].get("kernel_event_ns") or {}
                on = np.array([cpu_role.get(int(c), "client") == role for c in np.unique(kcpu)])
                cpus = np.unique(kcpu)[on]
                mrole = np.isin(kcpu, cpus)
                if "all" in kev:
                    kc[mrole & (kind != KIND["user"])] = max(0.0, float(kev["all"] or 0.0))
                    continue
                if "net" in kev and "other" in kev:        # per event class (analysis/probe.py)
                    net = np.isin(kind, NET_KINDS)
                    kc[mrole & net] = max(0.0, float(kev["net"] or 0.0))
                    kc[mrole & ~net & (kind != KIND["user"])] = max(0.0, float(kev["other"] or 0.0))
                    continue
                for (k, n) in set(zip(kind[mrole].tolist(), names[mrole].tolist())):
                    kname = _perf_name(k, kernel.names[n])
                    v = kev.get(kname)
                    if v:
                        kc[mrole & (kind == k) & (names == n)] = max(0.0, float(v))
            parts.append((np.asarray(kernel.ts), kcpu, kc,
                          np.where(np.isin(kind, NET_KINDS), CLASS_NET, CLASS_OTHER)))
        self.cpu = {}
        if not parts:
            return
        ts = np.concatenate([p[0] for p in parts])
        cpu = np.concatenate([p[1] for p in parts])
        cost = np.concatenate([p[2] for p in parts])
        cls = np.concatenate([p[3] for p in parts])
        for c in np.unique(cpu):
            m = cpu == c
            o = np.argsort(ts[m], kind="stable")
            per_class = np.stack([np.concatenate([[0], np.cumsum(cls[m][o] == k)]) for k in range(N_CLASSES)])
            self.cpu[int(c)] = (ts[m][o], np.concatenate([[0.0], np.cumsum(cost[m][o])]), per_class)

    def between(self, cpu, b, e):
        """(cost ns, number of tracepoints) on cpu with b <= ts < e."""
        x = self.cpu.get(int(cpu))
        if x is None or e <= b:
            return 0.0, 0
        ts, cum, _ = x
        i, j = ts.searchsorted(b, "left"), ts.searchsorted(e, "left")
        return float(cum[j] - cum[i]), int(j - i)

    def counts(self, cpu, b, e):
        """Events on cpu with b <= ts < e per class: (user, kernel net device, other kernel)."""
        x = self.cpu.get(int(cpu))
        if x is None or e <= b:
            return (0,) * N_CLASSES
        ts, _, pc = x
        i, j = ts.searchsorted(b, "left"), ts.searchsorted(e, "left")
        return tuple(int(v) for v in pc[:, j] - pc[:, i])


def _perf_name(kind, name):
    k = {v: kk for kk, v in KIND.items()}[kind]
    if k == "syscall_entry":
        return f"syscalls:sys_enter_{name}"
    if k == "syscall_exit":
        return f"syscalls:sys_exit_{name}"
    return _PERF_NAME.get(k, name)


def _attach_zero_ids(tid, call_id):
    """Call id 0 -> the next call id on the same thread (rows in time order)."""
    n = len(tid)
    if not n:
        return call_id
    order = np.lexsort((np.arange(n), tid))
    t, c = tid[order], call_id[order].copy()
    idx = np.where(c != 0, np.arange(n), n)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    ok = (c == 0) & (nxt < n)
    ok[ok] &= t[nxt[ok]] == t[ok]
    c[ok] = c[nxt[ok]]
    out = call_id.copy()
    out[order] = c
    return out


# ---------------------------------------------------------------- reconstruction

def reconstruct(case, progress=None, kernel=True, occurrences=False):
    """Rebuild every measured RPC of a case. progress(done, total) is called now and then.
    occurrences: also keep each step's occurrences [(begin, end, cpu)] per RPC in Row.occ
    (analysis/rtp.py walks them)."""
    ust = case.ust()
    problems = [dict(p, trace="ust") for p in ust.problems]
    roles = case.roles(ust)
    tids = np.asarray(ust.tid)
    keep = (np.asarray(ust.kind) == KIND["user"]) & np.isin(tids, list(roles))
    u = ust.select(keep)
    kev = None
    if kernel and case.has_kernel():
        kev = case.kernel()
        problems += [dict(p, trace="kernel") for p in kev.problems]
    cond = {"client": case.conditions("client"), "server": case.conditions("server")}
    if case.lossy or ust.lossy or (kev is not None and kev.lossy):
        problems.append({"what": "lossy", "message": "events were lost: RPCs with missing events are excluded"})

    ts = np.asarray(u.ts)
    tid = np.asarray(u.tid)
    cpu = np.asarray(u.cpu)
    frag = np.asarray(u.frag)
    cid = _attach_zero_ids(tid, np.asarray(u.call_id).astype(np.uint64))
    names = [u.names[i] for i in range(len(u.names))]
    mark_of = [_MARK.get(n) for n in names]
    uname = np.asarray(u.name)
    uroles = [roles[t] for t in tid.tolist()]

    # Calls: those with a c1_begin, minus warm-up: rpc-client makes one first call, then
    # `warmup` calls, then the measured ones (rpc/bench.c), in call-sequence order per activity.
    excluded = collections.Counter()
    c1b = u.name_id("c1_begin")
    starts = np.unique(cid[uname == c1b]) if c1b >= 0 else np.zeros(0, np.uint64)
    act, seq = starts >> np.uint64(32), starts & np.uint64(0xFFFFFFFF)
    measured = []
    for a in np.unique(act):
        s = np.sort(seq[act == a])
        nwarm = 1 + case.warmup
        excluded["warm-up (first call and --warmup calls)"] += min(nwarm, len(s))
        measured.append((a << np.uint64(32)) | s[nwarm:])
    call_ids = np.sort(np.concatenate(measured)) if measured else np.zeros(0, np.uint64)
    orphans = np.setdiff1d(np.unique(cid[cid != 0]), starts)
    if len(orphans):
        excluded["no c1_begin (started before the trace)"] += len(orphans)

    order = np.lexsort((ts, cid))
    scid = cid[order]
    lo = scid.searchsorted(call_ids, "left")
    hi = scid.searchsorted(call_ids, "right")

    # Per-thread user timestamps (to tell whether a thread slept between two marks).
    user_ts_of = {t: ts[tid == t] for t in roles}

    K = _Kernel(kev) if kev is not None and len(kev) else None
    costs = _Costs(case, u, uroles, kev)

    n = len(call_ids)
    rows = {name: Row(name, n) for name in ROW_ORDER}
    for name in ROW_ORDER:
        side, base, _ = EXTRA_ROWS.get(name, (None, name, None))
        side = side or _STEP[name]["side"]
        if base and not applicable(base, cond[side]):
            rows[name].status[:] = NOT_APPLICABLE

    ctx = dict(K=K, costs=costs, cond=cond, user_ts_of=user_ts_of, rows=rows, occ=occurrences)
    ok_rpc = np.ones(n, bool)
    for r in range(n):
        if progress and r % 500 == 0:
            progress(r, n)
        sl = order[lo[r]:hi[r]]
        evs = collections.defaultdict(list)          # step -> [(mark, ts, tid, cpu, frag)]
        for i in sl.tolist():
            m = mark_of[uname[i]]
            if m:
                evs[m[0]].append((m[1], int(ts[i]), int(tid[i]), int(cpu[i]), int(frag[i])))
        if not evs.get("C1") or not evs.get("C21") or evs["C21"][-1][0] != "end":
            ok_rpc[r] = False
            excluded["incomplete user marks (no c1_begin or c21_end)"] += 1
            continue
        _one_rpc(r, evs, ctx)
    if progress:
        progress(n, n)

    # RPCs without the user events of a step that applies: missing, counted per reason.
    for name, row in rows.items():
        row.status[~ok_rpc] = MISSING
        m = row.status == MISSING
        if m.any():
            tot = sum(row.reasons.values())
            if int(m.sum()) > tot:
                row.reasons["events not found"] += int(m.sum()) - tot
            row.why[m & (row.why == None)] = "events not found"  # noqa: E711
    keep = ok_rpc
    for row in rows.values():
        for k in ("begin", "end", "dur", "cost", "tracepoints", "count", "status", "why", "occ"):
            setattr(row, k, getattr(row, k)[keep])
    threads = {t: {"role": r, **(ust.threads.get(t) or {})} for t, r in roles.items()}
    if K is not None and K.inferred:
        for t, k in sorted(K.inferred.items()):
            problems.append({"what": "switch_in_inferred", "count": int(k), "trace": "kernel",
                             "message": f"{roles.get(t, 'thread')} thread {t}: {k} switch(es) in not traced (the "
                                        f"kernel did not report leaving the idle task on that CPU); each was taken "
                                        f"at the thread's first kernel event after its waking"})
    out = CaseRPCs(case, call_ids[keep], rows, excluded, problems, cond, threads)
    out.costs = costs                 # the probe cost of the events on each CPU (analysis/rtp.py charges the path)
    return out


def _put(ctx, name, r, occ, cpu_end=None):
    """Record a step's occurrences [(begin, end, cpu)] for RPC r (None: missing, with reason)."""
    row = ctx["rows"][name]
    if row.status[r] == NOT_APPLICABLE:
        return
    if isinstance(occ, str):
        row.status[r] = MISSING
        row.reasons[occ] += 1
        row.why[r] = occ
        return
    if not occ:
        return
    dur = cost = 0.0
    ntp = 0
    for b, e, c in occ:
        dur += e - b
        cc, k = ctx["costs"].between(c, b, e)
        cost += cc
        ntp += k
    row.begin[r], row.end[r] = occ[0][0], occ[-1][1]
    row.dur[r], row.cost[r], row.tracepoints[r], row.count[r] = dur, cost, ntp, len(occ)
    row.status[r] = MEASURED
    if ctx.get("occ"):
        row.occ[r] = [(int(b), int(e), int(c)) for b, e, c in occ]


def _pairs(marks, first, last):
    """Occurrences of a begin..end step from its events in time order."""
    out, b = [], None
    for mk, t, th, c, fr in marks:
        if mk == first:
            b = (t, c)
        elif mk == last and b is not None:
            out.append((b[0], t, c))
            b = None
    return out


def _one_rpc(r, evs, ctx):
    K, cond = ctx["K"], ctx["cond"]
    put = lambda name, occ: _put(ctx, name, r, occ)   # noqa: E731

    # User-mark steps.
    for s in STEPS:
        ue = [e.split("_", 1)[1] for e in s["user_events"]]
        if len(ue) < 2:
            continue
        marks = evs.get(s["id"], [])
        absent = {m.split("_", 1)[1] for c, ms in s["absent_marks"].items() if c in cond[s["side"]] for m in ms}
        if ue[0] in absent:
            continue            # begins at a kernel mark: done with the kernel steps below
        if not marks:
            if ctx["rows"][s["id"]].status[r] != NOT_APPLICABLE:
                put(s["id"], "user marks not found")
            continue
        if s["per"] == "call":
            b = next((m for m in marks if m[0] == ue[0]), None)
            e = next((m for m in reversed(marks) if m[0] == ue[-1]), None)
            put(s["id"], [(b[1], e[1], e[3])] if b and e and e[1] >= b[1] else "user marks not found")
        else:
            occ = _pairs(marks, ue[0], ue[-1])
            put(s["id"], occ or "user marks not found")

    c1, c21 = evs["C1"], evs["C21"]
    rtt_b, rtt_e, ccpu = c1[0][1], c21[-1][1], c21[-1][3]
    client_tid = c1[0][2]

    # Spans from user marks alone.
    def span(first_step, first_mark, last_step, last_mark):
        f = [m for m in evs.get(first_step, []) if m[0] == first_mark]
        la = [m for m in evs.get(last_step, []) if m[0] == last_mark]
        occ = []
        for b in f:
            e = next((x for x in la if x[1] >= b[1]), None)
            if e:
                occ.append((b[1], e[1], e[3]))
        return occ

    put("C7-C9", span("C7", "begin", "C9", "end") or "user marks not found")
    put("S8-S10", span("S8", "begin", "S10", "end") or "user marks not found")
    wait_end = ("C18", "end") if "recv_wait" in cond["client"] else ("C17", "end")
    waits_user = span("C14", "begin", *wait_end)
    put("C14-C17", waits_user or "not taken (the reply was there at the non-blocking select)")

    kernel_steps = [s["id"] for s in STEPS if not (len(s["user_events"]) >= 2 and
                    not any(c in cond[s["side"]] for c in s["absent_marks"]))]
    kernel_steps += ["C8'", "C8''", "S9'", "S9''"]
    waits_kernel = []
    if K is None:
        for name in kernel_steps:
            put(name, "no kernel trace")
    else:
        waits_kernel = _client_kernel(r, evs, ctx, client_tid)
        _server_kernel(r, evs, ctx)

    # RTT and its probe cost on the round-trip path.
    costs = ctx["costs"]
    row = ctx["rows"]["RTT"]
    row.begin[r], row.end[r], row.dur[r], row.count[r], row.status[r] = rtt_b, rtt_e, rtt_e - rtt_b, 1, MEASURED
    cost, ntp = costs.between(ccpu, rtt_b, rtt_e)
    scpu = next((m[3] for s in ("S4", "S6", "S8") for m in evs.get(s, [])), None)
    if scpu is not None and scpu != ccpu:
        for b, e in (waits_kernel or [(b, e) for b, e, _ in waits_user]):
            c1_, k1 = costs.between(ccpu, b, e)
            c2_, k2 = costs.between(scpu, b, e)
            cost += c2_ - c1_
            ntp += k2 - k1
    row.cost[r], row.tracepoints[r] = cost, ntp


def _send(K, th, b, e):
    """(enter, xmit or None, exit) kernel events of a send syscall on th between b and e."""
    kt = K.thread(th)
    en = kt["send_enter"].first(b, e)
    ex = kt["send_exit"].last(b, e)
    if not en or not ex or ex[0] < en[0]:
        return None
    x = kt["xmit"].first(en[0], ex[0])
    return en, x, ex


def _sends(ctx, r, evs, first, last, k_first, k_mid, k_last, split):
    K = ctx["K"]
    begins = [m for m in evs.get(first, []) if m[0] == "begin"]
    ends = [m for m in evs.get(last, []) if m[0] == "end"]
    o1, o2, o3, s1, s2 = [], [], [], [], []
    reason = None
    for b in begins:
        e = next((x for x in ends if x[1] >= b[1]), None)
        if not e:
            reason = "user marks not found"
            break
        got = _send(K, b[2], b[1], e[1])
        if not got:
            reason = "send syscall not found"
            break
        en, x, ex = got
        cpu = K.cpu[en[1]]
        o1.append((b[1], en[0], cpu))
        o2.append((en[0], ex[0], cpu))
        o3.append((ex[0], e[1], cpu))
        if x:
            s1.append((en[0], x[0], cpu))
            s2.append((x[0], ex[0], cpu))
    if reason or not begins:
        reason = reason or "user marks not found"
        for name in (k_first, k_mid, k_last, *split):
            _put(ctx, name, r, reason)
        return
    _put(ctx, k_first, r, o1)
    _put(ctx, k_mid, r, o2)
    _put(ctx, k_last, r, o3)
    if len(s1) == len(o2):
        _put(ctx, split[0], r, s1)
        _put(ctx, split[1], r, s2)
    else:
        for name in split:
            _put(ctx, name, r, "no net_dev_xmit inside the send")


def _wake(K, th, lo, hi):
    """The thread's sleep inside [lo, hi]: (out, softirq, waking, in) kernel events,
    or a reason string.

    Some kernels do not fire sched_switch when a CPU leaves its idle task (on this
    VM: never on CPU 1, neither for perf nor for ftrace). The switch in is then
    inferred at the thread's first kernel event after the waking (its return from
    the wait syscall), as the execution graph does (graph.Graph.last_in); K.inferred
    counts those occurrences."""
    kt = K.thread(th)
    out = kt["out"].first(lo, hi)
    if not out:
        return "did not sleep"
    wk = kt["waking"].last(out[0], hi)
    if not wk:
        return "sched_waking not found"
    sw_in = kt["in"].first(wk[0], hi)
    if not sw_in:
        sw_in = kt["any"].first(wk[0], hi)
        if not sw_in:
            return "switch back in not found"
        K.inferred[th] += 1
    sel = K.softirq.get(int(K.cpu[wk[1]]))
    sirq = sel.last(out[0], wk[0]) if sel else None
    return out, sirq, wk, sw_in


def _client_kernel(r, evs, ctx, th):
    K, cond = ctx["K"], ctx["cond"]["client"]
    _sends(ctx, r, evs, "C7", "C9", "C7", "C8", "C9", ("C8'", "C8''"))
    recv = "recv_wait" in cond
    wait_end_step = "C18" if recv else "C17"
    begins = [m for m in evs.get("C14", []) if m[0] == "begin"]
    ends = [m for m in evs.get(wait_end_step, []) if m[0] == "end"]
    occ = {k: [] for k in ("C14", "C15", "C16", "C17", "C18")}
    waits = []
    reason = None if begins else "not taken (the reply was there at the non-blocking select)"
    for b in begins:
        e = next((x for x in ends if x[1] >= b[1]), None)
        if not e:
            reason = "user marks not found"
            break
        w = _wake(K, th, b[1], e[1])
        if isinstance(w, str):
            reason = w
            break
        out, sirq, wk, sw_in = w
        ccpu = int(K.cpu[out[1]])
        occ["C14"].append((b[1], out[0], ccpu))
        occ["C16"].append((wk[0], sw_in[0], int(K.cpu[sw_in[1]])))
        if sirq:
            occ["C15"].append((sirq[0], wk[0], int(K.cpu[wk[1]])))
        waits.append((out[0], wk[0]))
        if recv:
            occ["C18"].append((sw_in[0], e[1], e[3]))
        else:
            ex = K.thread(th)["epoll_exit"].last(sw_in[0], e[1])
            if ex:
                occ["C17"].append((ex[0], e[1], e[3]))
    _put_waits(ctx, r, ("C14", "C15", "C16", "C17") + (("C18",) if recv else ()), occ, len(begins), reason)
    return waits


_WAIT_NOT_FOUND = {"C15": "NET_RX softirq not found", "S1": "NET_RX softirq not found",
                   "C17": "epoll exit not found", "S3": "epoll exit not found"}


def _put_waits(ctx, r, names, occ, expected, reason):
    """Record the wait steps of one side: a shared reason, a per-step reason when
    an occurrence is missing (not every wait found its kernel marks), or the occurrences."""
    for name in names:
        if reason:
            _put(ctx, name, r, reason)
        elif len(occ[name]) != expected:
            _put(ctx, name, r, _WAIT_NOT_FOUND.get(name, "events not found"))
        else:
            _put(ctx, name, r, occ[name])


def _server_kernel(r, evs, ctx):
    K, cond = ctx["K"], ctx["cond"]["server"]
    _sends(ctx, r, evs, "S8", "S10", "S8", "S9", "S10", ("S9'", "S9''"))
    recv = "recv_wait" in cond
    # Fragments received: each s4_end, woken before its s3_end (or s4_end with --wait recv).
    s4e = [m for m in evs.get("S4", []) if m[0] == "end"]
    s3e = [m for m in evs.get("S3", []) if m[0] == "end"]
    occ = {k: [] for k in ("S1", "S2", "S3", "S4")}
    reason = None if s4e else "user marks not found"
    for e4 in s4e:
        th = e4[2]
        if recv:
            mark = e4
        else:
            mark = next((x for x in reversed(s3e) if x[1] <= e4[1] and x[2] == th), None)
            if not mark:
                reason = "not taken (the request was there at the non-blocking select)"
                break
        uts = ctx["user_ts_of"].get(th)
        k = int(uts.searchsorted(mark[1], "left")) - 1
        prev_user = int(uts[k]) if k >= 0 else 0
        w = _wake(K, th, prev_user, mark[1])
        if isinstance(w, str):
            reason = w
            break
        out, sirq, wk, sw_in = w
        occ["S2"].append((wk[0], sw_in[0], int(K.cpu[sw_in[1]])))
        if sirq:
            occ["S1"].append((sirq[0], wk[0], int(K.cpu[wk[1]])))
        if recv:
            occ["S4"].append((sw_in[0], e4[1], e4[3]))
        else:
            ex = K.thread(th)["epoll_exit"].last(sw_in[0], mark[1])
            if ex:
                occ["S3"].append((ex[0], mark[1], mark[3]))
    _put_waits(ctx, r, ("S1", "S2") + (("S4",) if recv else ("S3",)), occ, len(s4e), reason)
    # S14: s14_begin -> the listener's switch out before its next user event.
    occ14 = []
    reason = None
    for b in (m for m in evs.get("S14", []) if m[0] == "begin"):
        uts = ctx["user_ts_of"].get(b[2])
        k = int(uts.searchsorted(b[1], "right"))
        nxt = int(uts[k]) if k < len(uts) else np.iinfo(np.int64).max
        out = K.thread(b[2])["out"].first(b[1], nxt)
        if not out:
            reason = "did not sleep"
            break
        occ14.append((b[1], out[0], int(K.cpu[out[1]])))
    _put(ctx, "S14", r, reason or occ14 or "not taken (the next request was there at the non-blocking select)")
    # C12/C13/S13: transmit-complete interrupts (a real NIC): not reconstructed yet.
    for name in ("C12", "C13", "S13"):
        _put(ctx, name, r, "transmit interrupt not reconstructed yet")
