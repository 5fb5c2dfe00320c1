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
import ctypes
import ctypes.util
import types

import numpy as np

from rpcscope.tracepoints import EVENTS, SPLIT, STEPS, applicable, syscalls_of

from .traceread import KIND

MEASURED, NOT_APPLICABLE, MISSING = 0, 1, 2

# The system calls that bound the send, receive and wait steps, as the catalog's kernel marks name them.
SEND_SYSCALLS = set(syscalls_of("kernel_begin", "sendmsg"))
RECV_SYSCALLS = set(syscalls_of("kernel_inside", "recv"))
EPOLL_SYSCALLS = set(syscalls_of("kernel_begin", "select"))

_SIDE_OF = {s["id"]: s["side"] for s in STEPS}
# Rows beside the catalog's steps: the parts of a split step (the catalog's [split]), and spans of user
# marks that cross several steps.
EXTRA_ROWS = {
    **{name: (_SIDE_OF[part["of"]], part["of"], part["name"]) for name, part in SPLIT.items()},
    "C7-C9": ("client", None, "packet send from user marks (c7_begin .. c9_end)"),
    "S8-S10": ("server", "S8", "packet send from user marks (s8_begin .. s10_end)"),
    "C14-C17": ("client", "C14", "the client's wait from user marks (c14_begin .. c17_end)"),
    "RTT": ("client", None, "traced round trip (c1_begin .. c21_end)"),
}
ROW_ORDER = [s["id"] for s in STEPS if s["side"] == "client"] + \
    [n for n, p in SPLIT.items() if _SIDE_OF[p["of"]] == "client"] + ["C7-C9", "C14-C17"] + \
    [s["id"] for s in STEPS if s["side"] == "server"] + \
    [n for n, p in SPLIT.items() if _SIDE_OF[p["of"]] == "server"] + ["S8-S10", "RTT"]

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
    """One step (or extra row) over the RPCs of a case: per RPC its begin, end, duration, number
    of occurrences and status; the occurrences themselves as flat arrays (occurrences(r)); the
    probe cost of the tracepoints inside them (cost, tracepoints), charged on first use with the
    run's calibration as it is then (CaseRPCs.charge)."""

    def __init__(self, name, n, owner=None):
        self.name = name
        self._owner = owner
        self.begin = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.dur = np.full(n, np.nan)
        self.count = np.zeros(n, np.int32)
        self.status = np.full(n, MISSING, np.int8)
        self.reasons = collections.Counter()
        self.why = np.full(n, None, object)      # per RPC: why the step is missing
        # Occurrences of the measured RPCs, in RPC then time order: RPC index, begin, end, CPU.
        self.occ_r = np.zeros(0, np.int64)
        self.occ_b = self.occ_e = self.occ_cpu = np.zeros(0, np.int64)
        # The probe charge: intervals whose events cost the step (sign -1: taken back, see the RTT).
        self.charge_intervals = None             # (r, cpu, b, e, sign) arrays; None: the occurrences
        self._cost = np.zeros(n)
        self._tracepoints = np.zeros(n, np.int32)
        self._user_events = np.zeros(n, np.int32)

    @property
    def cost(self):
        if self._owner is not None:
            self._owner.charge()
        return self._cost

    @property
    def tracepoints(self):
        if self._owner is not None:
            self._owner.charge()
        return self._tracepoints

    @property
    def user_events(self):
        """Per RPC: how many of its tracepoints are user events (the rest are kernel events)."""
        if self._owner is not None:
            self._owner.charge()
        return self._user_events

    @property
    def corrected(self):
        return self.dur - self.cost

    def occurrences(self, r):
        """[(begin, end, cpu)] of RPC r ([] where the step was not measured)."""
        lo, hi = self.occ_r.searchsorted(r, "left"), self.occ_r.searchsorted(r, "right")
        return list(zip(self.occ_b[lo:hi].tolist(), self.occ_e[lo:hi].tolist(), self.occ_cpu[lo:hi].tolist()))


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
    """The RPCs of one case: call ids and one Row per step. The events stay in the cache: the probe
    costs are charged a window of RPCs at a time (windows: [(first RPC, end RPC, lo ns, hi ns)], the
    time range each window's events were read from)."""

    def __init__(self, case, call_ids, rows, excluded, problems, conditions, threads, windows, roles, kernel):
        self.case = case
        self.call_ids = call_ids
        self.rows = rows
        self.excluded = excluded
        self.problems = problems
        self.conditions = conditions
        self.threads = threads
        self.windows = windows
        self._roles, self._kernel = roles, kernel
        self._window_events = None          # (window index, _ProbeEvents) of the last window costed
        self._charged_cal = None

    def __len__(self):
        return len(self.call_ids)

    @property
    def has_kernel(self):
        """Whether the case was rebuilt with its kernel trace."""
        return self._kernel

    def _calibration(self):
        return {r: self.case.calibration(r) for r in ("client", "server")}

    @property
    def probe_costs_available(self):
        """Whether the run has a probe calibration (else every cost is 0)."""
        return any(c.get("ust_event_ns") is not None for c in self._calibration().values())

    def window_of(self, r):
        """The index of the window RPC r was rebuilt in."""
        return int(np.searchsorted([w[0] for w in self.windows], r, "right") - 1)

    def window_costs(self, k, kernel=None):
        """The probe cost of the events on each CPU (_Costs) in window k's time range, with the run's
        calibration as it is now: analysis/probe.py walks the cases before their calibration exists,
        the tables are charged after. kernel: the window's kernel events, when already read."""
        if self._window_events is None or self._window_events[0] != k:
            _, _, lo, hi = self.windows[k]
            ust = self.case.span("ust", lo, hi, COST_COLUMNS)
            sel = (np.asarray(ust.kind) == KIND["user"]) & np.isin(np.asarray(ust.tid), list(self._roles))
            ust = ust.select(sel)
            server = [t for t, rl in self._roles.items() if rl == "server"]
            uroles = np.isin(np.asarray(ust.tid), server).astype(np.int64)
            if self._kernel and kernel is None:
                kernel = self.case.span("kernel", lo, hi, COST_COLUMNS)
            self._window_events = (k, _ProbeEvents(self.case, ust, uroles, kernel if self._kernel else None))
        return _Costs(self._window_events[1], self._calibration())

    def charge(self):
        """Fill every row's cost and tracepoints (see the module docstring) with the current calibration,
        a window at a time (an RPC's intervals all lie in its window's time range)."""
        cal = self._calibration()
        if cal == self._charged_cal:
            return
        n = len(self)
        for row in self.rows.values():
            row._cost, row._tracepoints, row._user_events = np.zeros(n), np.zeros(n, np.int32), np.zeros(n, np.int32)
        for k, (r0, r1, _, _) in enumerate(self.windows):
            costs = self.window_costs(k)
            for row in self.rows.values():
                if row.charge_intervals is not None:
                    r, cpu, b, e, sign = row.charge_intervals
                else:
                    r, cpu, b, e = row.occ_r, row.occ_cpu, row.occ_b, row.occ_e
                    sign = np.ones(len(r))
                m = (r >= r0) & (r < r1)
                if not m.any():
                    continue
                cost, cnt = costs.charge(cpu[m], b[m], e[m])
                user = costs.class_counts(cpu[m], b[m], e[m])[:, CLASS_UST]
                row._cost += np.bincount(r[m], cost * sign[m], minlength=n)[:n]
                row._tracepoints += np.bincount(r[m], cnt * sign[m], minlength=n)[:n].astype(np.int32)
                row._user_events += np.bincount(r[m], user * sign[m], minlength=n)[:n].astype(np.int32)
        self._charged_cal = cal
        self._window_events = None
        _trim()

    def nbytes(self):
        """Memory the per-RPC tables take: every row's per-RPC arrays, occurrences and charge intervals."""
        total = self.call_ids.nbytes
        for row in self.rows.values():
            arrays = [row.begin, row.end, row.dur, row.count, row.status, row.why, row._cost, row._tracepoints,
                      row._user_events, row.occ_r, row.occ_b, row.occ_e, row.occ_cpu, *(row.charge_intervals or ())]
            total += sum(np.asarray(a).nbytes for a in arrays)
        return total

    def release(self):
        """Let go of the last window's events: memory then holds the tables alone."""
        self._window_events = None

    def __getstate__(self):
        # Sent by an analysis worker (workers.py) without its case and the events of its last window:
        # the receiver has the case (attach()) and reads a window's events again when it needs them.
        return dict(self.__dict__, case=None, _window_events=None)

    def attach(self, case, kernel=True):
        """Adopt an unpickled CaseRPCs as case's reconstruction (reconstruct() then returns it)."""
        self.case = case
        case.__dict__.setdefault("_reconstructed", {})[kernel] = self
        return self


# ---------------------------------------------------------------- vectorised helpers

def _first_per(r, n):
    """Position of the first element of each group 0..n-1 in r (sorted), -1 where the group is empty."""
    out = np.full(n, -1, np.int64)
    g, i = np.unique(r, return_index=True)
    out[g] = i
    return out


def _last_per(r, n):
    out = np.full(n, -1, np.int64)
    g, i = np.unique(r[::-1], return_index=True)
    out[g] = len(r) - 1 - i
    return out


def _seek(qg, qt, sg, st, side):
    """For each query (group qg, time qt): the position in s (sorted by group, then time) of the
    first element of the same group at or after qt (side "first") or the last one at or before it
    ("last"); -1 where there is none."""
    qg, qt, sg, st = (np.asarray(a, np.int64) for a in (qg, qt, sg, st))
    if not len(qg) or not len(sg):
        return np.full(len(qg), -1, np.int64)
    _, rank = np.unique(np.concatenate([qt, st]), return_inverse=True)
    scale = len(rank) + 1
    qk = qg * scale + rank[:len(qt)]
    sk = sg * scale + rank[len(qt):]
    if side == "first":
        i = sk.searchsorted(qk, "left")
        ok = i < len(sk)
    else:
        i = sk.searchsorted(qk, "right") - 1
        ok = i >= 0
    j = np.clip(i, 0, len(sk) - 1)
    return np.where(ok & (sg[j] == qg), j, -1)


def _first_fail(qr, reason, n):
    """Queries in RPC order, each with a reason (None: it worked). Returns (the reason of each RPC's
    first failing query or None, mask of the queries before their RPC's first failure): the
    reconstruction of an RPC stops at its first failure."""
    pos = np.arange(len(qr))
    bad = np.array([x is not None for x in reason], bool) if len(reason) else np.zeros(0, bool)
    first = np.full(n, len(qr), np.int64)
    np.minimum.at(first, qr, np.where(bad, pos, len(qr)))
    fail = np.full(n, None, object)
    has = first < len(qr)
    fail[has] = np.asarray(reason, object)[first[has]]
    return fail, pos < first[qr] if len(qr) else np.zeros(0, bool)


class _Sel:
    """Sorted timestamps of some kernel events, with their global indices."""

    def __init__(self, ev, m):
        self.idx = np.nonzero(m)[0]
        self.ts = np.asarray(ev.ts)[self.idx].astype(np.int64)

    def first(self, lo, hi):
        """Positions of the first event in [lo, hi] per query (-1: none)."""
        i = self.ts.searchsorted(lo, "left")
        j = np.minimum(i, len(self.ts) - 1)
        return np.where((i < len(self.ts)) & (self.ts[j] <= hi), j, -1) if len(self.ts) else np.full(len(i), -1)

    def last(self, lo, hi):
        i = self.ts.searchsorted(hi, "right") - 1
        j = np.maximum(i, 0)
        return np.where((i >= 0) & (self.ts[j] >= lo), j, -1) if len(self.ts) else np.full(len(i), -1)


def _names_mask(ev, kind, names):
    ids = [ev.name_id(n) for n in names]
    ids = [i for i in ids if i >= 0]
    return (np.asarray(ev.kind) == KIND[kind]) & np.isin(np.asarray(ev.name), ids)


class _Hit:
    """Per query: the found event's timestamp and global index (-1 where not found)."""

    def __init__(self, n):
        self.ts = np.full(n, -1, np.int64)
        self.idx = np.full(n, -1, np.int64)

    @property
    def found(self):
        return self.idx >= 0

    def take(self, queries, sel, pos):
        """Record for the queries (indices) the events at positions pos of sel (-1: none)."""
        ok = pos >= 0
        self.ts[queries[ok]], self.idx[queries[ok]] = sel.ts[pos[ok]], sel.idx[pos[ok]]


class _Kernel:
    """Kernel events indexed by thread (lazily) and NET_RX softirqs by CPU."""

    def __init__(self, ev):
        self.ev = ev
        self.cpu = np.asarray(ev.cpu).astype(np.int64)
        kind, tid, tid2 = np.asarray(ev.kind), np.asarray(ev.tid), np.asarray(ev.tid2)
        self._tid, self._tid2, self._kind = tid, tid2, kind
        self.m_send_enter = _names_mask(ev, "syscall_entry", SEND_SYSCALLS)
        self.m_send_exit = _names_mask(ev, "syscall_exit", SEND_SYSCALLS)
        self.m_epoll_exit = _names_mask(ev, "syscall_exit", EPOLL_SYSCALLS)
        self.softirq, self.softirq_exit = {}, {}
        sirq = (kind == KIND["softirq_entry"]) & (np.asarray(ev.vec) == 3)
        sirq_x = (kind == KIND["softirq_exit"]) & (np.asarray(ev.vec) == 3)
        for c in np.unique(self.cpu[sirq]):
            self.softirq[int(c)] = _Sel(ev, sirq & (self.cpu == c))
            self.softirq_exit[int(c)] = _Sel(ev, sirq_x & (self.cpu == c))
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
                "out": _Sel(self.ev, on & (self._kind == KIND["sched_switch"]) & (self._tid2 != t)),
                "in": _Sel(self.ev, (self._kind == KIND["sched_switch"]) & (self._tid2 == t) & ~on),
                "waking": _Sel(self.ev, (self._kind == KIND["sched_waking"]) & (self._tid2 == t)),
                "any": _Sel(self.ev, on & (self._kind != KIND["sched_switch"])),
            }
        return k

    def find(self, what, side, th, lo, hi):
        """Per query (thread th, interval [lo, hi]): the first (side "first") or last event of the
        thread's kind `what` (thread()) in the interval."""
        th, lo, hi = (np.asarray(a, np.int64) for a in (th, lo, hi))
        out = _Hit(len(th))
        for t in np.unique(th).tolist():
            m = np.nonzero(th == t)[0]
            sel = self.thread(t)[what]
            out.take(m, sel, getattr(sel, side)(lo[m], hi[m]))
        return out

    def last_softirq(self, cpu, lo, hi):
        """Per query: the last NET_RX softirq entry on cpu in [lo, hi]."""
        out = _Hit(len(cpu))
        for c in np.unique(cpu).tolist():
            sel = self.softirq.get(int(c))
            if sel is None:
                continue
            m = np.nonzero(cpu == c)[0]
            out.take(m, sel, sel.last(lo[m], hi[m]))
        return out

    def softirq_around(self, cpu, lo, t):
        """Per query: the entry of the NET_RX softirq on cpu that began in [lo, t] and was still
        running at t (no exit of it in between), e.g. the one a waking at t ran in."""
        out = self.last_softirq(cpu, lo, t)
        for c in np.unique(cpu).tolist():
            x = self.softirq_exit.get(int(c))
            m = np.nonzero((cpu == c) & out.found)[0]
            if x is None or not len(m):
                continue
            ended = x.first(out.ts[m], t[m] - 1) >= 0       # it exited before t: t ran outside it
            out.ts[m[ended]], out.idx[m[ended]] = -1, -1
        return out


# Probe classes (analysis/probe.py calibrates one cost per class where the calls run): user events,
# kernel network-device events (one per packet per device), the other kernel events (syscalls,
# scheduler, softirq, copies).
CLASS_UST, CLASS_NET, CLASS_OTHER = 0, 1, 2
N_CLASSES = 3
NET_KINDS = [KIND[k] for k in ("net_queue", "net_start_xmit", "net_xmit", "net_receive", "net_rx")]
_KIND_CLASS = np.full(256, CLASS_OTHER, np.int8)        # a kernel event's class by its kind
_KIND_CLASS[NET_KINDS] = CLASS_NET
# What _ProbeEvents reads of a window: the events' time, CPU, thread (user: whose) and cost key.
COST_COLUMNS = ("ts", "kind", "cpu", "tid", "name")


class _ProbeEvents:
    """The events that cost the calls something, per CPU in time order, with what their cost depends
    on (a key: the role of the host, user or kernel, the kernel event's kind and name) and their
    probe class. Independent of the calibration: built once per case, costed by _Costs."""

    def __init__(self, case, ust, uroles, kernel):
        cpu_role = {}
        for h in case.run.hosts.values():
            for c in h.get("cpus") or []:
                cpu_role.setdefault(int(c), h.get("role"))
        self.keys = [("client", "user", None, None), ("server", "user", None, None)]
        parts = []
        if len(ust):
            parts.append((np.asarray(ust.ts), np.asarray(ust.cpu), np.asarray(uroles, np.int64),
                          np.full(len(ust), CLASS_UST, np.int8)))
        if kernel is not None and len(kernel):
            kind = np.asarray(kernel.kind).astype(np.int64)
            names = np.asarray(kernel.name).astype(np.int64)
            kcpu = np.asarray(kernel.cpu)
            # Lookup tables rather than np.isin over every event (the analysis's hottest loop).
            is_server = np.zeros(int(kcpu.max()) + 2 if len(kcpu) else 1, bool)
            for c in np.unique(kcpu).tolist():
                is_server[c] = cpu_role.get(int(c), "client") == "server"
            server = is_server[kcpu]
            # One key per (host role, kind, name) present: a dense code, then its rank among those
            # present (a bincount, not a sort of every event).
            nn = max(len(kernel.names), 1)
            dense = (server.astype(np.int64) * 256 + kind) * nn + names
            present = np.nonzero(np.bincount(dense))[0]
            rank = np.zeros(int(present[-1]) + 1 if len(present) else 1, np.int64)
            rank[present] = np.arange(len(present))
            key = rank[dense]
            for x in present.tolist():
                role, rest = divmod(x, 256 * nn)
                k, name = divmod(rest, nn)
                self.keys.append(("server" if role else "client", "kernel", k, kernel.names[name]))
            parts.append((np.asarray(kernel.ts), kcpu, key.astype(np.int64) + 2, _KIND_CLASS[kind]))
        self.cpu = {}                       # cpu -> (ts, key, class), in time order
        if not parts:
            return
        ts, cpu, key, cls = (np.concatenate([p[i] for p in parts]) for i in range(4))
        for c in np.unique(cpu):
            m = np.nonzero(cpu == c)[0]
            m = m[np.argsort(ts[m], kind="stable")]
            self.cpu[int(c)] = (ts[m], key[m], cls[m])

    def key_costs(self, cal):
        """The calibrated cost of one event of each key (negative or missing costs count 0)."""
        out = np.zeros(len(self.keys))
        for i, (role, source, kind, name) in enumerate(self.keys):
            c = cal.get(role) or {}
            if source == "user":
                out[i] = max(0.0, float(c.get("ust_event_ns") or 0.0))
                continue
            kev = c.get("kernel_event_ns") or {}
            if kind == KIND["user"]:
                continue
            if "all" in kev:
                v = kev["all"]
            elif "net" in kev and "other" in kev:        # per event class (analysis/probe.py)
                v = kev["net"] if kind in NET_KINDS else kev["other"]
            else:
                v = kev.get(_perf_name(kind, name))
            out[i] = max(0.0, float(v or 0.0))
        return out


class _Costs:
    """Cumulative probe cost of the events recorded on each CPU, with calibration cal {role: ...}."""

    def __init__(self, events, cal):
        cost = events.key_costs(cal)
        self.cpu = {c: (ts, np.concatenate([[0.0], np.cumsum(cost[key])])) for c, (ts, key, _) in events.cpu.items()}
        self._cls = {c: cls for c, (_, _, cls) in events.cpu.items()}

    def charge(self, cpu, b, e):
        """(cost ns, number of tracepoints) of the events on cpu with b <= ts < e, per interval."""
        cost, k = np.zeros(len(cpu)), np.zeros(len(cpu), np.int64)
        for c in np.unique(cpu).tolist():
            x = self.cpu.get(int(c))
            if x is None:
                continue
            ts, cum = x
            m = np.nonzero((cpu == c) & (e > b))[0]
            i, j = ts.searchsorted(b[m], "left"), ts.searchsorted(e[m], "left")
            cost[m], k[m] = cum[j] - cum[i], j - i
        return cost, k

    def _class_cumsum(self, cpu):
        """Cumulative event counts per class on a CPU, made on first use (rtp.py's path)."""
        pc = self._cls[cpu]
        if pc.ndim == 1:
            pc = self._cls[cpu] = np.stack([np.concatenate([[0], np.cumsum(pc == k, dtype=np.int32)])
                                            for k in range(N_CLASSES)])
        return pc

    def class_counts(self, cpu, b, e):
        """Events on cpu with b <= ts < e per class (user, kernel net device, other kernel), per
        interval: an (intervals, classes) array."""
        out = np.zeros((len(cpu), N_CLASSES), np.int64)
        for c in np.unique(cpu).tolist():
            x = self.cpu.get(int(c))
            if x is None:
                continue
            m = np.nonzero((cpu == c) & (e > b))[0]
            i, j = x[0].searchsorted(b[m], "left"), x[0].searchsorted(e[m], "left")
            pc = self._class_cumsum(int(c))
            out[m] = (pc[:, j] - pc[:, i]).T
        return out


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
#
# Every rule works on all the RPCs of a case at once: a step's occurrences are arrays (RPC index,
# begin, end, CPU) in RPC then time order, and the kernel events that bound them are found with one
# sorted search per thread (_Kernel.find) instead of one per RPC.

BEGIN, END, OTHER = 0, 1, 2
_MARK_CODE = {"begin": BEGIN, "end": END}
_STEP_INDEX = {s["id"]: i for i, s in enumerate(STEPS)}


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
    """Record a step for every RPC. occ: (r, begin, end, cpu) arrays of its occurrences in RPC then
    time order; fail: per RPC the reason it is missing (None: none). An RPC with a reason is MISSING
    with it, one with occurrences MEASURED, one with neither stays MISSING (settled at the end).
    Rows the run's conditions rule out are left alone."""
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
    r, b, e, c = (np.asarray(a, np.int64) for a in occ)
    keep = ~skip[r]
    r, b, e, c = r[keep], b[keep], e[keep], c[keep]
    cnt = np.bincount(r, minlength=n)
    has = cnt > 0
    row.dur[has] = np.bincount(r, (e - b).astype(float), minlength=n)[has]
    row.count[has] = cnt[has]
    row.begin[has] = b[_first_per(r, n)[has]]
    row.end[has] = e[_last_per(r, n)[has]]
    row.status[has] = MEASURED
    row.occ_r, row.occ_b, row.occ_e, row.occ_cpu = r, b, e, c


def _sub(occ, m):
    return tuple(np.asarray(a)[m] for a in occ)


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
                for out, n in ((c1, "c1_begin"), (c21, "c21_end")):
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


def _trim():
    """Give the heap's free pages back to the system (glibc's malloc_trim): the windows' arrays are
    freed between long-lived pieces of the tables, and the free pages between them would otherwise
    stay resident, window after window."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None                 # not glibc: nothing to trim


_LIBC = _libc()


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
        if pieces[0].charge_intervals is not None:
            ci = [x.charge_intervals for x in pieces]
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
    c1, c21 = U.of("C1"), U.of("C21")
    first_c1, last_c21 = _first_per(U.r[c1], n_all), _last_per(U.r[c21], n_all)
    ok = (first_c1 >= 0) & (last_c21 >= 0)
    ok[ok] &= U.mark[c21[last_c21[ok]]] == END
    if (~ok).any():
        excluded["incomplete user marks (no c1_begin or c21_end)"] += int((~ok).sum())
        renum = np.cumsum(ok) - 1
        m = ok[U.r]
        U = _Marks(renum[U.r[m]], U.ts[m], U.tid[m], U.cpu[m], U.step[m], U.mark[m])
        call_ids = call_ids[ok]
        c1, c21 = U.of("C1"), U.of("C21")
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
    waits_user = _span(ctx, "C14", "C18" if "recv_wait" in cond["client"] else "C17")
    _put(ctx, "C7-C9", *_or_reason(ctx, _span(ctx, "C7", "C9"), "user marks not found"))
    _put(ctx, "S8-S10", *_or_reason(ctx, _span(ctx, "S8", "S10"), "user marks not found"))
    _put(ctx, "C14-C17", *_or_reason(ctx, waits_user, NOT_TAKEN_REPLY))

    client_tid = U.tid[c1[first_c1]]
    waits_kernel = None
    if K is None:
        kernel_steps = [s["id"] for s in STEPS if not (len(s["user_events"]) >= 2 and
                        not any(c in cond[s["side"]] for c in s["absent_marks"]))]
        for name in kernel_steps + ["C8'", "C8''", "S9'", "S9''"]:
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


def _sends(ctx, first, last, k_first, k_mid, k_last, split):
    """The send syscalls inside user marks first..last: the three steps around and in the syscall
    and the split of the syscall at its first device hand-off."""
    K, n = ctx.K, ctx.n
    qr, b, th, e, _, found = _to_next_end(ctx, first, last)
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
    w.resume = _sub((qr, w.wk.ts, w.sw_in.ts, K.cpu[w.sw_in.idx]), w.good)
    w.softirq = _sub((qr, w.sirq.ts, w.wk.ts, K.cpu[w.wk.idx]), w.good & w.sirq.found)
    return w, fail, before


def _client_kernel(ctx, client_tid):
    """C7-C9 and the client's waits (C14-C18); returns its sleeps (r, out, waking) for the RTT charge."""
    K = ctx.K
    _sends(ctx, "C7", "C9", "C7", "C8", "C9", ("C8'", "C8''"))
    recv = "recv_wait" in ctx.cond["client"]
    qr, b, _, e, ecpu, found = _to_next_end(ctx, "C14", "C18" if recv else "C17")
    th = client_tid[qr]
    # A reply that came before the client waited for it (there at the non-blocking select, or as the
    # client entered its blocking wait, which returned at once) was not waited for: no C14-C16 for
    # it, and a call that waited for no reply is whole (its wait steps do not apply to it). With
    # --wait recv C18 begins at the switch back in, which such a call has not: it still fails.
    w, fail, before = _sleeps(ctx, qr, th, b, e, ~found, "user marks not found", NOT_TAKEN_REPLY,
                              absent=() if recv else ("did not sleep",), none_absent=True)
    good = w.good
    occ = {"C14": _sub((qr, b, w.out.ts, K.cpu[w.out.idx]), good), "C16": w.resume, "C15": w.softirq}
    if recv:
        occ["C18"] = _sub((qr, w.sw_in.ts, e, ecpu), good)
        occ["C17"] = (np.zeros(0, np.int64),) * 4
        _put_waits(ctx, ("C14", "C15", "C16", "C17", "C18"), occ, qr, fail)
    else:
        # C17 (the return from the blocking wait) also when it returned without sleeping.
        slept = good | (w.absent & found)
        ex = K.find("epoll_exit", "last", th, np.where(good, w.sw_in.ts, b), e)
        occ["C17"] = _sub((qr, ex.ts, e, ecpu), slept & ex.found)
        _put_waits(ctx, ("C14", "C15", "C16"), occ, qr, fail, ~w.absent)
        _put_waits(ctx, ("C17",), occ, qr, fail, slept)
        _did_not_occur(ctx, ("C14", "C15", "C16", "C17", "C14-C17"), w.no_wait,
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


_WAIT_NOT_FOUND = {"C15": "NET_RX softirq not found", "S1": "NET_RX softirq not found",
                   "C17": "epoll exit not found", "S3": "epoll exit not found"}


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
    K, U, n = ctx.K, ctx.U, ctx.n
    _sends(ctx, "S8", "S10", "S8", "S9", "S10", ("S9'", "S9''"))
    recv = "recv_wait" in ctx.cond["server"]
    # Fragments received: each s4_end, woken before its s3_end (or s4_end with --wait recv).
    p4 = U.of("S4", END)
    qr, th, t4, c4 = U.r[p4], U.tid[p4], U.ts[p4], U.cpu[p4]
    if recv:
        mts, mcpu, has_mark = t4, c4, np.ones(len(p4), bool)
    else:
        # The last s3_end of the call on the same thread at or before the s4_end.
        p3 = U.of("S3", END)
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
    occ = {"S2": w.resume, "S1": w.softirq}
    if recv:
        occ["S4"] = _sub((qr, w.sw_in.ts, t4, c4), good)
        _put_waits(ctx, ("S1", "S2", "S4"), occ, qr, fail)
    else:
        # S3 (the return from the blocking wait) also when it returned without sleeping.
        slept = good | (w.absent & has_mark)
        ex = K.find("epoll_exit", "last", th, np.where(good, w.sw_in.ts, prev), mts)
        occ["S3"] = _sub((qr, ex.ts, mts, mcpu), slept & ex.found)
        _put_waits(ctx, ("S1", "S2"), occ, qr, fail, ~w.absent)
        _put_waits(ctx, ("S3",), occ, qr, fail, slept)
        _did_not_occur(ctx, ("S1", "S2", "S3"), w.no_wait, "the request was there before the listener waited")

    # S14: s14_begin -> the listener's switch out before its next user event.
    p14 = U.of("S14", BEGIN)
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
    _put(ctx, "S14", _sub((qr, b, end, K.cpu[end_idx]), found), fail)
    # No s14_begin: the next request was there at the non-blocking select, the listener did not wait.
    _did_not_occur(ctx, ("S14",), _first_per(qr, n) < 0, "the next request was there before the listener waited")
    # C12/C13/S13: transmit-complete interrupts (a real NIC): not reconstructed yet.
    for name in ("C12", "C13", "S13"):
        _put(ctx, name, fail=_reasons(n, "transmit interrupt not reconstructed yet"))


def _rtt(ctx, rtt_b, rtt_e, ccpu, waits_kernel, waits_user):
    """The RTT row (c1 .. c21_end) and its probe charge: the client's CPU over the call, except
    while the client waits, where the server's CPU is charged instead (one CPU: the same thing)."""
    U, n = ctx.U, ctx.n
    row = ctx.rows["RTT"]
    row.begin[:], row.end[:], row.dur[:] = rtt_b, rtt_e, (rtt_e - rtt_b).astype(float)
    row.count[:], row.status[:] = 1, MEASURED
    r = np.arange(n)
    row.occ_r, row.occ_b, row.occ_e, row.occ_cpu = r, rtt_b, rtt_e, ccpu
    scpu = np.full(n, -1, np.int64)
    for step in ("S8", "S6", "S4"):            # the first of S4, else S6, else S8
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
