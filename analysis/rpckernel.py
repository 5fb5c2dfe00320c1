"""The kernel events the per-RPC rules look up (analysis/rpcs.py): one sorted search per thread for the
system call, wake-up or softirq that bounds a step (_Kernel), the probe class of every event (user,
network device, other kernel) and the costs charged for them inside a step (_ProbeEvents, _Costs).
"""
import collections

import numpy as np

from rpcscope.tracepoints import KERNEL_EVENTS, NET_RX_VECTOR, syscalls_of

from .traceread import KIND

# The system calls that bound the send, receive and wait steps, as the catalog's kernel marks name them.
SEND_SYSCALLS = set(syscalls_of("kernel_begin", "sendmsg"))
RECV_SYSCALLS = set(syscalls_of("kernel_inside", "recv"))
EPOLL_SYSCALLS = set(syscalls_of("kernel_begin", "select"))

# The analysis's kernel event kinds as perf and tracefs name them (the catalog's [kernel_events]).
_PERF_NAME = {kind: e["perf"] for kind, e in KERNEL_EVENTS.items() if "code" in e}

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
        sirq = (kind == KIND["softirq_entry"]) & (np.asarray(ev.vec) == NET_RX_VECTOR)
        sirq_x = (kind == KIND["softirq_exit"]) & (np.asarray(ev.vec) == NET_RX_VECTOR)
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
# The network-device events: the kinds of the catalog's [kernel_events] in the kernel's net subsystem.
NET_KINDS = [KIND[k] for k, e in KERNEL_EVENTS.items() if "code" in e and e["perf"].startswith("net:")]
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
