"""The measured round-trip path: for each RPC, which steps the client
really waited for, and how much slack the others had.

    from rpcscope.analysis.rtp import analyze_rtp
    res = analyze_rtp("runs/x")          # writes runs/x/analysis/rtp.json

The walk (walk()) goes backwards from the client's call end (c21_end) to its call
begin (c1_begin) over the execution graph (graph.py):

* while the current thread runs, the time belongs to the step it is in: the
  innermost of the RPC's step occurrences on that thread (a NET_RX softirq step,
  C15/S1, inside C8''/S9''; C8'/C8'' inside C8; user steps otherwise), or
  "<role> (no step)" between marks;
* where the thread was switched in, it had been blocked or preempted: the time
  from the sched_waking to the switch in is the wake-up latency (named C16/S2 when
  the reconstruction has that step there); the walk then jumps to the waker at
  the waking: in a NET_RX softirq, the softirq up to the waking (C15/S1, else
  "softirq NET_RX"; a packet it sent before the waking, a TCP ACK, splits off
  "<role> sends before the wake-up" from that send on), then through the packet link (skbaddr) to the sender's
  net_dev_xmit; on veth/loopback that sender is the thread the softirq
  interrupted, inside its own sendmsg'' (the walk continues on it at the softirq
  entry), on a real link the gap is "network"; in task context (a futex wake from
  the listener to an executor) the walk continues on the waker; a timer or an
  unknown waker leaves the block as "blocked (...)" on the same thread; preempted
  time is "preempted".

The segments visited are contiguous in time, so they sum to the RTT exactly. The
client's clock measures a little more than C1 .. C21 (its reads each side of the
call): that time is one more segment per case, "client call edges" (CALL_EDGES),
added to the typical call and to the corrected RTT, not to the walked RTT.
Every step occurrence (or part of one) not visited overlaps the path; its slack
is the time from the end of the off-path run of work it belongs to (on its
thread) to the moment the path next needed that thread (the start of the
thread's next path segment, e.g. the waking of the client by the reply), or to
the call end if the path never comes back to the thread (The Mystery Machine's
slack: how much the step could grow before it joined the path).
"""
import bisect
import collections
import concurrent.futures
import json
import multiprocessing
import os

import numpy as np

from rpcscope.rundir import RTP_JSON
from rpcscope.tracepoints import SPLIT, side_step, with_role

from .graph import Graph
from .rpcs import CALL_FIRST, CALL_ROW, EXTRA_ROWS, KERNEL_COLUMNS, MEASURED, reconstruct
from .rtpstats import _SIDE, CALL_EDGES, aggregate, probe_split, split_charges  # noqa: F401  (the tests use them here)
from .run import load_run

RTP_FORMAT = "rpcscope-rtp/1"
MAX_SEGMENTS = 100_000
# Label priority: the innermost step wins where occurrences nest.
_SOFTIRQ_STEPS = set(with_role("softirq"))
_WAKE_STEPS = set(with_role("wake"))          # blocked-phase steps: waking .. switch in
_SENDMSG_STEPS = set(with_role("sendmsg"))    # cut at the device hand-off into the parts in SPLIT
_SPLIT = set(SPLIT)
_SKIP = {name for name, (_, base, _) in EXTRA_ROWS.items() if name not in _SPLIT}  # C7-C9, RTT, ...
# A NET_RX softirq that wakes a thread of a role, and that wake-up's latency, are that role's
# receive-interrupt and resume steps by the catalog's definition, also where the reconstruction
# could not name them (a switch lost in the trace).
_INFERRED = {side: (side_step(side, "softirq"), side_step(side, "wake")) for side in ("client", "server")}
# The segment of a receive softirq from a packet it sent (an ACK) to its waking of the reader.
SENT_BEFORE_WAKEUP = "sends before the wake-up"
# The path's time in the idle task's context: a packet waiting in a queue (a shaped link's qdisc) until
# a timer sends it on.
QUEUED = "network (queued)"

DCE_NOTES = [
    "DCE (Figure 5, one-packet call over UDP/Ethernet): C9-C14 and S10-S14 overlap the path; "
    "sendmsg' is on it, sendmsg'' is not; the network and the controllers are.",
    "Linux on veth/loopback: the receiver's whole protocol input (S1 for the request, C15 for the "
    "reply) runs inside the sender's sendmsg'' (a NET_RX softirq in the sender's context), so the part "
    "of C8''/S9'' before that softirq is on the path and there is no 'network' or controller segment.",
    "The wake-ups (S2, C16) are on the path; with client and server on different CPUs they include "
    "waking an idle CPU.",
    "Over TCP a request of two or more segments is ACKed by the server's receive at once; where that "
    "receive takes tcp_rcv_established's fast path the ACK goes out before the server is woken and is on "
    f"the path ('server {SENT_BEFORE_WAKEUP}'), on the slow path it goes out after the wake-up, beside "
    "the path.",
    "Two kernels: a 'network' segment runs from the sender's hand-off to its device to the receiver's "
    "NET_RX softirq, on the merged clock. The request's and the reply's add up to the client's wait less "
    "the server's time, whatever the clocks' offset; how they split depends on it (within clock_sync's "
    "bound).",
    f"'{CALL_EDGES}': the client's clock measures the call from before C1 to after C21; the time outside "
    "C1..C21 (the traced run's client-measured p50 less the p50 of its walked RTTs) is a segment of its own, so that "
    "the path adds up to what the untraced RTT measures.",
]


class _Labels:
    """A thread's step occurrences in one RPC, flattened to non-overlapping pieces (innermost wins)."""

    def __init__(self, ivs):
        # ivs: [(b, e, label, prio)]
        ivs = [iv for iv in ivs if iv[1] > iv[0]]
        if not ivs:
            self.b = self.e = np.zeros(0, np.int64)
            self.lab = []
            return
        bounds = sorted({x for iv in ivs for x in iv[:2]})
        pos = {x: i for i, x in enumerate(bounds)}
        # Paint each elementary piece with the intervals from the weakest to the strongest: the last
        # paint is the innermost (highest priority, then the latest begin, then the first listed).
        owner = [None] * (len(bounds) - 1)
        for k in sorted(range(len(ivs)), key=lambda k: (ivs[k][3], ivs[k][0], -k)):
            i, j = pos[ivs[k][0]], pos[ivs[k][1]]
            owner[i:j] = [ivs[k][2]] * (j - i)
        pb, pe, lab = [], [], []
        for i, name in enumerate(owner):
            if name is None:
                continue
            lo, hi = bounds[i], bounds[i + 1]
            if lab and lab[-1] == name and pe[-1] == lo:
                pe[-1] = hi
            else:
                pb.append(lo)
                pe.append(hi)
                lab.append(name)
        self.b, self.e, self.lab = np.array(pb, np.int64), np.array(pe, np.int64), lab

    def at(self, t):
        """(begin, label) of the piece holding the instant just before t, or (end of the last piece
        before t, None) in a gap, or (None, None)."""
        k = int(self.b.searchsorted(t, "left")) - 1
        if k < 0:
            return None, None
        if self.e[k] >= t:
            return int(self.b[k]), self.lab[k]
        return int(self.e[k]), None


def _prio(name):
    if name in _SOFTIRQ_STEPS:
        return 3
    if name in _SPLIT:
        return 2
    if name in _SENDMSG_STEPS:
        return 0
    return 1


def rpc_labels(rpcs, r, graph, roles):
    """{tid: _Labels} of RPC r, and {step: [(b, e, tid)]} its occurrences by thread."""
    by_tid = collections.defaultdict(list)
    occs = {}
    side_tid = {}
    for tid, role in roles.items():
        side_tid.setdefault(role, tid)
    for name, row in rpcs.rows.items():
        if name in _SKIP or row.status[r] != MEASURED:
            continue
        side = _SIDE.get(name, "client")
        lst = []
        for b, e, c in row.occurrences(r):
            at = e if name in _WAKE_STEPS else (b if name in _SOFTIRQ_STEPS else (b + e) // 2)
            t = graph.current(c, at) if graph is not None else -1
            if name not in _SOFTIRQ_STEPS and roles.get(t) != side:
                t = side_tid.get(side, -1)
            lst.append((b, e, t))
            by_tid[t].append((b, e, name, _prio(name)))
        occs[name] = lst
    return {t: _Labels(v) for t, v in by_tid.items()}, occs


def _softirq_sender(graph, w, roles, begin):
    """For a waking w in a NET_RX softirq: (the receive it ran for, or None; that packet's origin, or
    None; the thread the softirq ran in the context of; whether the packet was sent inside it). On
    veth/loopback the packet was sent on the softirq's CPU before it began, inside the sender's own
    send, and the sender is that thread; else the thread the softirq interrupted. With several hosts
    the origin is the last hand-off to a device by one of the call's threads (roles) on another host
    since the call began (begin), or None: an skb address links only within a host, and there it may
    be a freed skb's address reused. Every packet the server sends in a call answers the client's first
    one: on the client's host, the origin must follow the client's first hand-off of the call, and a
    copy of a packet's data to one of the call's threads on the origin's host must lie between them (the
    server reading the request; where that host's trace records such copies). Where the merged clock puts
    it otherwise, its error (wider than the one-way delay) hides the order: the crossing is not placed."""
    entry = w["softirq"][0]
    rx = graph.receive_in(w["cpu"], entry, w["ts"])
    if graph.several_hosts:
        clients = [t for t, r in roles.items() if r == "client"]
        since = graph.first_xmit_on_host(w["cpu"], begin, entry, clients) if clients else None
        org = graph.xmit_on_other_host(w["cpu"], begin if since is None else since, entry, roles)
        if org and since is not None and graph.copied_on_host(org["cpu"], since, org["ts"], roles) is False:
            org = None
    else:
        org = graph.packet_origin(rx) if rx is not None else None
    inside = bool(org and org["cpu"] == w["cpu"] and org["ts"] <= entry)
    return rx, org, (org["tid"] if inside else graph.current(w["cpu"], entry)), inside


def walk(graph, labels, client_tid, begin, end, roles=None, role_cpu=None):
    """Segments [(label, b, e, tid, cpu)] of the round-trip path from end back to begin, in time
    order, and a list of problems (empty when the walk reached the call begin cleanly). cpu is
    where the segment's work ran (None: nothing ran for the RPC, e.g. blocked or network time);
    role_cpu {role: cpu} is the fallback where the trace has no switch in to say."""
    roles = roles or {}
    role_cpu = role_cpu or {}
    segs, problems = [], []
    T, t = client_tid, end
    empty = _Labels([])

    def add(label, b, e, tid, cpu=None):
        b = max(b, begin)
        if e > b:
            segs.append((label, b, e, tid, cpu))

    def cpu_of(tid, li):
        return li[1] if li is not None else role_cpu.get(roles.get(tid))

    def role(tid):
        return roles.get(tid, f"tid {tid}")

    for _ in range(MAX_SEGMENTS):
        if t <= begin:
            break
        li = graph.last_in(T, t)
        lo = graph.last_out(T, t)
        if li is not None and lo is not None and lo[0] > li[0]:
            # Not running just before t (arrived at a thread that was off CPU): blocked time.
            add(f"{role(T)} off CPU", max(lo[0], begin), t, T)
            t = lo[0]
            continue
        run_start = li[0] if li is not None else -1
        if run_start < t:
            pb, lab = labels.get(T, empty).at(t)
            if lab is None:
                b = max(run_start, pb if pb is not None else run_start, begin)
                # The idle task on the path: a CPU that did nothing for the call until a timer softirq
                # sent a queued packet on (a shaped link's token bucket releasing it): the network's time.
                add(QUEUED if T == 0 else f"{role(T)} (no step)", b, t, T, cpu_of(T, li))
            else:
                b = max(run_start, pb)
                add(lab, b, t, T, cpu_of(T, li))
            t = b
            if T == client_tid and t <= begin:
                break
            continue
        # t is the switch in: the thread was blocked or preempted before.
        out = graph.last_out(T, t)
        if out is None:
            problems.append(f"{role(T)}: no switch out before {t}")
            add("unknown", begin, t, T)
            break
        w = graph.wakeup_before(T, t, out[0])
        if w is None and out[2] != 0:
            w = graph.waking_while_going_to_sleep(T, out[0])
        if w is None:
            add("preempted" if out[2] == 0 else f"{role(T)} blocked (no waking)", out[0], t, T)
            t = out[0]
            continue
        pb, lab = labels.get(T, empty).at(t)
        wrole = roles.get(T)
        ctx = w["context"]
        net = ctx == "softirq NET_RX" and w["softirq"]
        add(lab if lab in _WAKE_STEPS else _INFERRED[wrole][1] if net and wrole in _INFERRED else
            f"wakeup latency ({ctx})",
            w["ts"], t, T, cpu_of(T, li))
        if net:
            se = w["softirq"][0]
            rx, org, victim, inside = _softirq_sender(graph, w, roles, begin)
            pb, lab = labels.get(victim, empty).at(w["ts"])
            # A packet the receive sent before it woke the reader (over TCP, an ACK: the fast path of
            # tcp_rcv_established sends it first, the slow path after the wake-up) is its own segment.
            sent = graph.sent_after(rx, w["ts"]) if rx is not None else None
            if sent is not None:
                add(f"{wrole or role(T)} {SENT_BEFORE_WAKEUP}", sent, w["ts"], victim, w["cpu"])
            add(lab if lab in _SOFTIRQ_STEPS else _INFERRED[wrole][0] if wrole in _INFERRED else "softirq NET_RX",
                se, sent if sent is not None else w["ts"], victim, w["cpu"])
            if inside:
                T, t = victim, se
            elif org and org["ts"] <= se:
                add("network", org["ts"], se, -1)
                T, t = org["tid"], org["ts"]
            elif victim in roles and not graph.several_hosts:
                problems.append(f"softirq at {se}: no packet link; continuing on the interrupted thread")
                T, t = victim, se
            else:
                problems.append(f"softirq at {se}: no packet link")
                add("unknown", begin, se, -1)
                break
        elif ctx == "task" and (w["waker"] in roles or w["waker"] in labels):
            T, t = w["waker"], w["ts"]
        else:
            add(f"{role(T)} blocked ({ctx})" if ctx != "task" else f"{role(T)} blocked (woken by tid {w['waker']})",
                out[0], w["ts"], T)
            t = out[0]
    else:
        problems.append("walk did not end")
    segs.reverse()
    return segs, problems


# RPCs per case whose probe cost is also taken out with the dependencies kept (retime): evenly spaced
# over the walked ones, enough for a median (`rpcscope rtp` of a 16-case run: 0.9 s more, 15.7 -> 16.6 s).
RETIME_SAMPLE = 200


def retime(graph, costs, roles, client_tid, begin, end):
    """The probe cost the call (begin .. end on the client) loses when every recorded event's calibrated
    cost is taken out of the thread it ran on and every wake-up still waits for its waker: the traced RTT
    less the untraced one as the dependencies, not the walked path, predict it.

    The threads of the RPC (roles) are replayed in time order. Each keeps a shift, the probe cost
    taken out of it so far: a running piece adds the cost of the events on its CPU in it; preempted
    time and a block ended by no known waker keep their length. A block ended by a waking is where two
    threads meet: the woken thread comes back after the later of the moment it went to sleep (less
    its shift) and the moment its waker (the interrupted sender of the NET_RX softirq, or the waker
    itself in task context) woke it (less the waker's shift), by the wake-up latency less the events
    in it. So where a branch beside the path had less slack than the probe cost the path sheds, that
    branch becomes the path, and the shift taken out is less than the walked path's own probe cost
    (analyze_case's probe_ns), the correction's assumption: it takes off min(pA, s + pB) for a branch of
    slack s and probe cost pB beside path probes pA (The Mystery Machine's slack, applied to the probe
    effect); never more than the path's, where every waker is known."""
    def charge(cpu, b, e):
        if cpu is None or e <= b:
            return 0.0
        return float(costs.charge(np.array([cpu]), np.array([b], np.int64), np.array([e], np.int64))[0][0])

    pieces = sorted((b, e, st, t) for t in roles for b, e, st in graph.states(t, begin, end))
    done = collections.defaultdict(list)       # tid -> [(begin, end, cpu or None if not running, shift at begin)]
    shift = dict.fromkeys(roles, 0.0)           # tid -> shift at the end of its last piece
    asleep = {}                                 # tid -> (switch out, shift then) of the block in progress

    def shift_at(tid, ts):
        for b, e, cpu, sh in reversed(done.get(tid, ())):
            if b <= ts:
                return sh + charge(cpu, b, min(ts, e))
        return 0.0

    def waker_shift(w):
        if w["context"] == "softirq NET_RX" and w["softirq"]:
            entry = w["softirq"][0]
            _, org, victim, _ = _softirq_sender(graph, w, roles, begin)
            if victim in roles:
                return shift_at(victim, w["ts"])
            if org and org["tid"] in roles:          # a real link: the sender, then the receive's own events
                return shift_at(org["tid"], org["ts"]) + charge(w["cpu"], entry, w["ts"])
            return None
        if w["context"] == "task" and w["waker"] in roles:
            return shift_at(w["waker"], w["ts"])
        return None

    for b, e, st, t in pieces:
        sh = shift[t]
        if st == "running" or st.startswith("interrupted"):
            li = graph.last_in(t, b)
            cpu = li[1] if li else None
            done[t].append((b, e, cpu, sh))
            shift[t] = sh + charge(cpu, b, e)
            continue
        done[t].append((b, e, None, sh))
        if st == "blocked":
            asleep[t] = (b, sh)
        elif st == "wakeup":
            out, out_shift = asleep.pop(t, (b, sh))
            w = graph.wakeup_before(t, e, b) or graph.waking_while_going_to_sleep(t, b)
            ws = waker_shift(w) if w is not None else None
            if ws is None:
                continue                                 # no known waker: the block keeps its length
            li = graph.last_in(t, e)
            # The switch in follows the later of the going to sleep and the waking (a waking that raced
            # the switch out: the switch out) by the latency measured after it, less the events in it;
            # kept where the waking now comes first (a thread that would not block at all skips it, but
            # the walked path keeps it, and the correction is compared with that path).
            since = max(w["ts"], out)
            latency = (e - since) - charge(li[1] if li else None, since, e)
            new_in = max(out - out_shift, w["ts"] - ws) + latency
            shift[t] = float(e - new_in)
            done[t][-1] = (b, e, None, shift[t])
    return shift_at(client_tid, end)


def path_occurrences(occs, segs):
    """{label: how many times the path passes through it}: for a step, the number of its occurrences
    (occs: {step: [(b, e, tid)]}) holding a piece of the path, not the number of pieces. On veth the
    server's receive softirq (S1) runs inside the client's send (C8''), which the path then visits in
    two pieces for one fragment sent: a count of pieces had C8'' on the path 9 times at 24096 bytes,
    whose request is 7 fragments. A piece no occurrence holds (a segment named by inference, a gap)
    counts once."""
    held, loose = collections.defaultdict(set), collections.Counter()
    for lab, sb, se, _, _ in segs:
        k = next((k for k, (b, e, _) in enumerate(occs.get(lab, ())) if b <= sb and se <= e), None)
        if k is None:
            loose[lab] += 1
        else:
            held[lab].add(k)
    return {lab: len(held[lab]) + loose[lab] for lab in set(held) | set(loose)}


def slack(occs, segs, end):
    """{step: (off-path ns, min slack ns)} for the steps with time off the path."""
    on = collections.defaultdict(list)      # tid -> [(b, e)] path segments on that thread
    for lab, b, e, tid, _cpu in segs:
        on[tid].append((b, e))
    # A thread's path segments are disjoint (the path is a partition of the call's time): sorted by
    # begin, their ends are sorted too.
    on = {t: ([b for b, _ in sorted(v)], [e for _, e in sorted(v)]) for t, v in on.items()}
    starts = {t: np.array(v[0], np.int64) for t, v in on.items()}
    out = {}
    # Off-path pieces per thread, from every step occurrence minus the path segments.
    pieces = collections.defaultdict(list)
    nothing = ([], [])
    for name, lst in occs.items():
        if name in _SENDMSG_STEPS and any(p in occs for p, part in SPLIT.items() if part["of"] == name):
            continue
        for b, e, tid in lst:
            sb, se = on.get(tid, nothing)
            k = bisect.bisect_right(se, b)          # the first segment ending after b
            x = b
            while k < len(sb) and sb[k] < e:
                if sb[k] > x:
                    pieces[tid].append((x, sb[k], name))
                x = max(x, se[k])
                k += 1
            if e > x:
                pieces[tid].append((x, e, name))
    for tid, lst in pieces.items():
        st = starts.get(tid, np.zeros(0, np.int64))
        ends = sorted(q for _, q, _ in lst)
        for x, y, name in lst:
            k = int(st.searchsorted(y, "left"))
            join = int(st[k]) if k < len(st) else end
            # The run of off-path work this piece belongs to ends at the last piece end before the join.
            last = ends[bisect.bisect_right(ends, join) - 1] if ends and ends[0] <= join else y
            run_end = max(y, last)
            s = max(0, join - run_end)
            off, sl = out.get(name, (0, None))
            out[name] = (off + (y - x), s if sl is None else min(sl, s))
    return out


def analyze_case(case, progress=None, sample=None, detail=True):
    """Walk the round-trip path of every RPC of a case (sample: at most that many, evenly spaced over
    the window of calls in the middle of the capture). detail=False keeps only each walk's totals and events per
    class (no segments or
    slack): what the probe calibration needs."""
    rpcs = reconstruct(case)
    res = {"case": case.id, "transport": case.transport, "proc": case.proc, "size": case.size,
           "rpcs": len(rpcs), "walked": 0, "problems": collections.Counter(), "per_rpc": [],
           "untraced_p50_ns": (case.meta.get("untraced") or {}).get("p50"),
           "traced": case.meta.get("traced") or {}}
    if not case.has_kernel() or not len(rpcs):
        res["problems"]["no kernel trace" if not case.has_kernel() else "no RPCs"] += 1
        return res, rpcs
    roles = {t: v["role"] for t, v in rpcs.threads.items()}
    role_cpu = {h.get("role"): int(h["cpus"][0]) for h in case.run.hosts.values() if h.get("cpus")}
    res["probe_costs"] = rpcs.probe_costs_available
    res["probe_calibration"] = case.calibration("client").get("source", "loopback") if res["probe_costs"] else None
    if sample is None or sample >= len(rpcs):
        walk_rpcs = range(len(rpcs))
    else:
        # Evenly spaced over the window of calls in the middle of the capture (rpcs.windows): one
        # window's events read and costed instead of every window's.
        r0, r1, _, _ = rpcs.windows[rpcs.window_of(len(rpcs) // 2)]
        walk_rpcs = np.unique(np.linspace(r0, r1 - 1, min(sample, r1 - r0)).astype(int)).tolist()
    n_walk = len(walk_rpcs)
    retimed = set(np.unique(np.linspace(0, n_walk - 1, min(RETIME_SAMPLE, n_walk)).astype(int)).tolist()) \
        if n_walk else set()
    # The graph and the probe costs of one window of RPCs at a time (rpcs.windows): its events only.
    window, g, costs = None, None, None
    for i_walk, r in enumerate(walk_rpcs):
        if progress and i_walk % 200 == 0:
            progress(i_walk, len(walk_rpcs))
        w = rpcs.window_of(r)
        if w != window:
            _, _, lo, hi = rpcs.windows[w]
            window = w
            kev = case.span("kernel", lo, hi, KERNEL_COLUMNS)
            g = Graph(kev, threads=list(roles))
            costs = rpcs.window_costs(w, kernel=kev)
            del kev
        labels, occs = rpc_labels(rpcs, r, g, roles)
        b, e = int(rpcs.rows[CALL_ROW].begin[r]), int(rpcs.rows[CALL_ROW].end[r])
        c1 = occs.get(CALL_FIRST)
        client = c1[0][2] if c1 else next((t for t, v in roles.items() if v == "client"), -1)
        segs, probs = walk(g, labels, client, b, e, roles, role_cpu)
        for p in probs:
            res["problems"][p.split(" at ")[0].split(":")[0]] += 1
        total = sum(s[2] - s[1] for s in segs)
        # The probe effect on the path: the calibrated cost of the tracepoints recorded on the
        # segment's CPU inside it (rpcs.py's charging rule, applied to the path alone).
        seg_cost = [0.0] * len(segs)
        seg_ev = [(0, 0)] * len(segs)        # per segment: (user events, kernel events) in it
        n_cls = (0, 0, 0)                    # events on the path: user, kernel net device, other kernel
        ran = [k for k, s in enumerate(segs) if s[4] is not None]
        if ran:
            cpu, sb, se = (np.array([segs[k][i] for k in ran], np.int64) for i in (4, 1, 2))
            cls = costs.class_counts(cpu, sb, se)
            for k, pc, c in zip(ran, costs.charge(cpu, sb, se)[0].tolist(), cls.tolist()):
                seg_cost[k] = pc
                seg_ev[k] = (c[0], c[1] + c[2])
            n_cls = tuple(int(v) for v in cls.sum(axis=0))
        one = {"call_id": int(rpcs.call_ids[r]), "rtt_ns": e - b, "sum_ns": total,
               "probe_ns": float(sum(seg_cost)), "path_events": n_cls, "ok": not probs}
        if detail and i_walk in retimed and not probs and ran:
            one["probe_retimed_ns"] = retime(g, costs, roles, client, b, e)
        if detail:
            one["segments"] = [(lab, sb - b, se - sb, round(pc, 1), *ev)
                               for (lab, sb, se, _, _), pc, ev in zip(segs, seg_cost, seg_ev)]
            one["slack"] = slack(occs, segs, e)
            one["occurrences"] = path_occurrences(occs, segs)
        res["per_rpc"].append(one)
        res["walked"] += 1
    return res, rpcs


def _case_result(case, per_rpc, progress=None):
    res, rpcs = analyze_case(case, progress)
    rpcs.release()
    agg = aggregate(res)
    if per_rpc:
        agg["per_rpc"] = res["per_rpc"]
    return agg, res, rpcs


_FORKED_RUN = None          # the run a forked worker inherits (_case_in_worker)


def _case_in_worker(k, per_rpc):
    return _case_result(_FORKED_RUN.cases[k], per_rpc)[0]


def analyze_rtp(path, progress=None, keep_rpcs=False, per_rpc=False, workers=None, calibrate=None):
    """Walk every RPC of every case; writes rtp.json. The cases are walked in parallel, one forked
    worker per CPU (workers=1: in this process; keep_rpcs, which keeps the reconstructions, implies it).
    calibrate: the in-situ probe calibration (analysis/probe.py in_situ; `rpcscope rtp` passes it), else
    every case is corrected with the manifest's loopback costs."""
    global _FORKED_RUN
    run = load_run(path, calibrate)
    out = {"format": RTP_FORMAT, "run": str(path), "placement": run.manifest.get("placement"),
           "virtual_link": run.virtual_link, "cases": [], "notes": DCE_NOTES}
    kept = []
    n = len(run.cases)
    workers = 1 if keep_rpcs else min(workers or os.cpu_count() or 1, n)
    if workers <= 1:
        for k, case in enumerate(run.cases):
            cb = (lambda d, t, k=k, c=case.id: progress(k, n, c, d, t)) if progress else None
            agg, res, rpcs = _case_result(case, per_rpc, cb)
            out["cases"].append(agg)
            if keep_rpcs:
                kept.append((res, rpcs))
    else:
        run.probe                 # the probe calibration once, before the workers inherit the run
        _FORKED_RUN = run
        try:
            ctx = multiprocessing.get_context("fork")
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                futs = [pool.submit(_case_in_worker, k, per_rpc) for k in range(n)]
                for k, f in enumerate(futs):
                    if progress:
                        progress(k, n, run.cases[k].id, 0, 0)
                    out["cases"].append(f.result())
        finally:
            _FORKED_RUN = None
    run.out_dir.mkdir(parents=True, exist_ok=True)
    slim = dict(out, cases=[{k: v for k, v in c.items() if k != "per_rpc"} for c in out["cases"]])
    (run.out_dir / RTP_JSON).write_text(json.dumps(slim, indent=1) + "\n")
    if keep_rpcs:
        out["_kept"] = kept
    return out
