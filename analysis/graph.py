"""The execution graph of one kernel (a host, or the shared kernel of the local
testbed): the state layer the round-trip-path walk (rtp.py) runs on, built the
way Trace Compass builds its OS execution graph, from the normalised kernel
events of traceread.

    from rpcscope.analysis.graph import Graph
    g = Graph(case.kernel(), threads=[client_tid, server_tid])
    g.states(tid, lo, hi)        # [(begin, end, state)]: running / preempted / blocked / interrupted
    g.current(cpu, t)            # the thread running on a CPU at t (0: idle, -1 unknown)
    g.wakeup_before(tid, t)      # the sched_waking that ended the block the thread leaves at t
    g.softirq_at(cpu, t)         # the softirq interval running on cpu at t, or None
    g.packet_origin(i)           # the sender's net_dev_xmit a netif_receive_skb came from

Everything is NumPy arrays indexed with searchsorted: memory is a few arrays the
size of the scheduler, softirq and network events, whatever the number of RPCs.

Timelines (per thread of interest, from sched_switch):
    running      switched in .. switched out
    interrupted  a softirq (NET_RX, timers, ...) ran on the thread's CPU while it ran
    preempted    switched out runnable (prev_state 0) .. switched in again
    blocked      switched out sleeping (prev_state != 0) .. the sched_waking that woke it
    wakeup       that waking .. switched in (the wake-up latency; "ready" in Trace Compass)
Per CPU: softirq intervals (entry .. exit, vector) = interrupt context.

Links:
    wakeup   waker -> wakee: every sched_waking, with the waking context: "softirq NET_RX"
             (or another softirq vector: "softirq TIMER", "softirq HRTIMER", ...) when it
             falls inside a softirq on its CPU, "irq" inside a hard interrupt, else "task"
             (the waker thread itself, e.g. a futex wake from the listener to an executor).
    packet   sender's net_dev_xmit -> receiver's netif_receive_skb, matched by skbaddr: on a
             veth pair (and through the testbed's bridge) the same skb travels from the
             sender's device to the peer device, hop by hop in one NET_RX softirq; the
             chain is followed back from the final receive to the first xmit of that skb
             (stopping at a copy to user space, which ends a previous packet's life, or a
             gap of more than PACKET_GAP_NS). Two kernels share no skb, and a host reuses
             the address of an skb it freed untraced (handed to a tap): with several hosts a
             receive is taken to carry the last packet one of the call's threads on another
             host handed to its device before it, on the merged clock (timeline.py; how far
             that clock can be trusted is clock_sync's bound), and no skb chain is followed;
             a reply the merged clock puts before its request was read is not linked
             (rtp.py _softirq_sender).
"""
import numpy as np

from .timeline import CPU_STRIDE
from .traceread import KIND

SOFTIRQ_NAMES = {0: "HI", 1: "TIMER", 2: "NET_TX", 3: "NET_RX", 4: "BLOCK", 5: "IRQ_POLL",
                 6: "TASKLET", 7: "SCHED", 8: "HRTIMER", 9: "RCU"}
PACKET_GAP_NS = 1_000_000
NEVER = np.iinfo(np.int64).max


def _a(ev, col):
    return np.asarray(getattr(ev, col))


class Graph:
    def __init__(self, ev, threads=None):
        """ev: traceread.Events of one kernel; threads: tids of interest (None: every tid
        seen in sched_switch)."""
        ts, kind, cpu, tid, tid2 = (_a(ev, c) for c in ("ts", "kind", "cpu", "tid", "tid2"))
        ts = ts.astype(np.int64)
        self.t_begin = int(ts[0]) if len(ts) else 0
        self.t_end = int(ts[-1]) if len(ts) else 0

        # Scheduler: per CPU the current thread over time; per thread its switches in and out.
        sw = np.nonzero(kind == KIND["sched_switch"])[0]
        self.sw_ts, self.sw_cpu = ts[sw], cpu[sw].astype(np.int64)
        self.sw_prev, self.sw_next = tid[sw].astype(np.int64), tid2[sw].astype(np.int64)
        self.sw_state = _a(ev, "state")[sw].astype(np.int64)
        self._cpu_sw = {}
        for c in np.unique(self.sw_cpu):
            m = np.nonzero(self.sw_cpu == c)[0]
            self._cpu_sw[int(c)] = (self.sw_ts[m], self.sw_next[m], self.sw_prev[m])
        if threads is None:
            threads = np.unique(np.concatenate([self.sw_prev, self.sw_next]))
        self.threads = sorted(int(t) for t in threads)
        self._in, self._out, self._evts = {}, {}, {}
        for t in self.threads:
            me = np.nonzero(tid == t)[0]
            self._evts[t] = (ts[me], cpu[me].astype(np.int64))
            mi = (self.sw_next == t) & (self.sw_prev != t)
            mo = (self.sw_prev == t) & (self.sw_next != t)
            self._in[t] = (self.sw_ts[mi], self.sw_cpu[mi])
            self._out[t] = (self.sw_ts[mo], self.sw_cpu[mo], self.sw_state[mo])

        # Softirq intervals per CPU: each entry paired with the next exit of that vector on its CPU.
        vec = _a(ev, "vec").astype(np.int64)
        self._sirq = {}
        me, mx = kind == KIND["softirq_entry"], kind == KIND["softirq_exit"]
        for c in np.unique(cpu[me | mx]):
            on = cpu == c
            eb, ev_ = ts[me & on], vec[me & on]
            xb, xv = ts[mx & on], vec[mx & on]
            ends = np.full(len(eb), NEVER, np.int64)
            for v in np.unique(ev_):
                xs = xb[xv == v]
                k = xs.searchsorted(eb[ev_ == v], "left")
                ends[ev_ == v] = np.where(k < len(xs), xs[np.minimum(k, len(xs) - 1)], NEVER)
            # An entry whose next entry comes before its exit has lost its exit: end it there.
            nxt = np.append(eb[1:], NEVER)
            ends = np.minimum(ends, nxt)
            self._sirq[int(c)] = (eb, ends, ev_)
        # Hard interrupts per CPU (real NICs).
        self._irq = {}
        mi, mxi = kind == KIND["irq_entry"], kind == KIND["irq_exit"]
        for c in np.unique(cpu[mi]):
            on = cpu == c
            eb, xb = ts[mi & on], ts[mxi & on]
            k = xb.searchsorted(eb, "left")
            ends = xb[np.minimum(k, len(xb) - 1)] if len(xb) else np.full(len(eb), NEVER, np.int64)
            self._irq[int(c)] = (eb, np.where(k < len(xb), ends, NEVER))

        # Wakeups: sched_waking (sched_wakeup when the trace has no waking).
        wk = np.nonzero(kind == KIND["sched_waking"])[0]
        if not len(wk):
            wk = np.nonzero(kind == KIND["sched_wakeup"])[0]
        self.wk_ts, self.wk_cpu = ts[wk], cpu[wk].astype(np.int64)
        self.wk_waker, self.wk_wakee = tid[wk].astype(np.int64), tid2[wk].astype(np.int64)
        self._wk = {}
        for t in self.threads:
            m = np.nonzero(self.wk_wakee == t)[0]
            self._wk[t] = (self.wk_ts[m], m)

        # Packets: every net event and copy to user that names an skb, grouped by skb in time order.
        mnet = np.isin(kind, [KIND["net_xmit"], KIND["net_receive"], KIND["copy_to_user"]]) & \
            (_a(ev, "skb") != 0)
        idx = np.nonzero(mnet)[0]
        skb = _a(ev, "skb")[idx]
        o = np.lexsort((ts[idx], skb))
        self.pk_idx = idx[o]
        self.pk_skb, self.pk_ts = skb[o], ts[idx][o]
        self.pk_kind = kind[idx][o]
        self.pk_cpu, self.pk_tid = cpu[idx][o].astype(np.int64), tid[idx][o].astype(np.int64)
        dev = _a(ev, "dev")[idx][o]
        self.pk_dev = dev
        self._names = ev.names
        self._pos_order = np.argsort(self.pk_idx, kind="stable")     # position of a global index: packet_origin
        self.several_hosts = len(np.unique(self.pk_cpu // CPU_STRIDE)) > 1
        cp = np.nonzero(kind == KIND["copy_to_user"])[0]
        self._copy_ts, self._copy_host, self._copy_tid = ts[cp], cpu[cp] // CPU_STRIDE, tid[cp]
        rx = np.nonzero(kind == KIND["net_receive"])[0]
        self._rx = {}
        for c in np.unique(cpu[rx]):
            m = rx[cpu[rx] == c]
            self._rx[int(c)] = (ts[m], m)
        # Transmits per CPU (a device's start of transmit or hand-off), with their skb: sent_in.
        tx = np.nonzero(np.isin(kind, [KIND["net_start_xmit"], KIND["net_xmit"]]))[0]
        self._skb, self._ts, self._cpu = _a(ev, "skb"), ts, cpu
        self._tx = {}
        for c in np.unique(cpu[tx]):
            m = tx[cpu[tx] == c]
            self._tx[int(c)] = (ts[m], self._skb[m])

    # ------------------------------------------------------------ state queries
    def current(self, cpu, t):
        """The thread running on cpu at t (the next tid of the last switch at or before t),
        -1 when the trace has no switch on that CPU before t."""
        x = self._cpu_sw.get(int(cpu))
        if x is None:
            return -1
        k = int(x[0].searchsorted(t, "right")) - 1
        if k < 0:
            return int(x[2][0]) if len(x[2]) else -1      # before the first switch: its prev
        return int(x[1][k])

    def last_in(self, tid, t):
        """(ts, cpu) of the thread's last switch in at or before t, or None. A switch in the
        trace lost (the thread has events after its last switch out) is inferred at the
        thread's first event after that switch out."""
        ins, cpus = self._in.get(tid, (np.zeros(0, np.int64), None))
        k = int(ins.searchsorted(t, "right")) - 1
        got = (int(ins[k]), int(cpus[k])) if k >= 0 else None
        out = self.last_out(tid, t)
        if out is not None and (got is None or out[0] > got[0]):
            ets, ecpu = self._evts.get(tid, (np.zeros(0, np.int64), None))
            j = int(ets.searchsorted(out[0], "right"))
            if j < len(ets) and ets[j] <= t:
                return int(ets[j]), int(ecpu[j])
        return got

    def last_out(self, tid, t):
        """(ts, cpu, prev_state) of the thread's last switch out strictly before t, or None."""
        outs, cpus, st = self._out.get(tid, (np.zeros(0, np.int64), None, None))
        k = int(outs.searchsorted(t, "left")) - 1
        return (int(outs[k]), int(cpus[k]), int(st[k])) if k >= 0 else None

    def wakeup_before(self, tid, t, since):
        """The last sched_waking of tid in [since, t]: dict(ts, cpu, waker, context, vec,
        softirq=(entry, exit) or None), or None."""
        wts, wi = self._wk.get(tid, (np.zeros(0, np.int64), None))
        k = int(wts.searchsorted(t, "right")) - 1
        if k < 0 or wts[k] < since:
            return None
        i = int(wi[k])
        return self._wakeup(i)

    def waking_while_going_to_sleep(self, tid, out_ts):
        """The last sched_waking of tid after its last own event before its switch out at out_ts, or
        None: a wake-up that raced the thread's going to sleep. The waker's try_to_wake_up found the
        thread still on its CPU and queued the wake-up until it was off, so the waking comes before
        the switch out (prev_state S) and none after it; seen here on a UDP server that entered
        epoll_wait a moment before a fragment arrived."""
        ets, _ = self._evts.get(tid, (np.zeros(0, np.int64), None))
        j = int(ets.searchsorted(out_ts, "left")) - 1
        if j < 0:
            return None
        return self.wakeup_before(tid, out_ts, int(ets[j]) + 1)

    def _wakeup(self, i):
        ts, c = int(self.wk_ts[i]), int(self.wk_cpu[i])
        s = self.softirq_at(c, ts)
        if s:
            ctx = f"softirq {SOFTIRQ_NAMES.get(s[2], s[2])}"
        elif self.irq_at(c, ts):
            ctx = "irq"
        else:
            ctx = "task"
        return {"ts": ts, "cpu": c, "waker": int(self.wk_waker[i]), "wakee": int(self.wk_wakee[i]),
                "context": ctx, "softirq": s}

    def softirq_at(self, cpu, t):
        """(entry, exit, vector) of the softirq running on cpu at t, or None."""
        x = self._sirq.get(int(cpu))
        if x is None:
            return None
        k = int(x[0].searchsorted(t, "right")) - 1
        if k >= 0 and x[1][k] >= t:
            return int(x[0][k]), int(x[1][k]), int(x[2][k])
        return None

    def softirqs(self, cpu, lo, hi):
        """[(entry, exit, vector)] of the softirqs on cpu overlapping [lo, hi]."""
        x = self._sirq.get(int(cpu))
        if x is None:
            return []
        i = int(x[0].searchsorted(hi, "right"))
        j = int(x[0].searchsorted(lo - PACKET_GAP_NS * 10, "left"))
        m = j + np.nonzero(x[1][j:i] >= lo)[0]
        return [(int(x[0][k]), int(x[1][k]), int(x[2][k])) for k in m]

    def irq_at(self, cpu, t):
        x = self._irq.get(int(cpu))
        if x is None:
            return None
        k = int(x[0].searchsorted(t, "right")) - 1
        return (int(x[0][k]), int(x[1][k])) if k >= 0 and x[1][k] >= t else None

    def states(self, tid, lo, hi):
        """The thread's timeline over [lo, hi]: [(begin, end, state)], state one of running,
        interrupted (a softirq on its CPU while it ran), preempted, blocked, wakeup (its waking, or
        its switch out where the waking raced it (waking_while_going_to_sleep), .. its switch in).
        A switch in lost in the trace is inferred at the thread's first event after its switch out,
        as last_in does (on this VM a CPU leaving its idle task fires no switch)."""
        outs, _, ost = self._out.get(tid, (np.zeros(0, np.int64),) * 3)
        ins, _ = self._in.get(tid, (np.zeros(0, np.int64), None))
        ets, _ = self._evts.get(tid, (np.zeros(0, np.int64), None))
        li, lo_ = self.last_in(tid, lo), self.last_out(tid, lo + 1)
        running = li is not None and (lo_ is None or li[0] > lo_[0])
        st = lo_[2] if lo_ else 1
        out, x = [], lo
        while x < hi:
            if running:
                k = int(outs.searchsorted(x, "right"))
                y = min(int(outs[k]), hi) if k < len(outs) else hi
                cpu = self.last_in(tid, x)
                p = x
                for e, z, v in (self.softirqs(cpu[1], x, y) if cpu else ()):
                    b, e2 = max(e, x), min(z, y)
                    if b > p:
                        out.append((p, b, "running"))
                    out.append((b, e2, f"interrupted (softirq {SOFTIRQ_NAMES.get(v, v)})"))
                    p = e2
                if y > p:
                    out.append((p, y, "running"))
                if k < len(outs):
                    st = int(ost[k])
            else:
                # The next switch in, or the first own event after the switch out (a switch in lost).
                k, j = int(ins.searchsorted(x, "right")), int(ets.searchsorted(x, "right"))
                cand = [int(v[i]) for v, i in ((ins, k), (ets, j)) if i < len(v)]
                y = min(min(cand), hi) if cand else hi
                w = self.wakeup_before(tid, y, x) if st != 0 else None
                if st == 0:
                    out.append((x, y, "preempted"))
                elif w and w["ts"] < y:
                    out.append((x, w["ts"], "blocked"))
                    out.append((w["ts"], y, "wakeup"))
                elif self.waking_while_going_to_sleep(tid, x) is not None:
                    out.append((x, y, "wakeup"))         # woken before it was off its CPU: all latency
                else:
                    out.append((x, y, "blocked"))
            x, running = y, not running          # y > x: every search above is strictly after x
        return [(b, e, s) for b, e, s in out if e > b]

    # ------------------------------------------------------------ packets
    def receive_in(self, cpu, lo, hi):
        """Global index of the last netif_receive_skb on cpu in [lo, hi], or None."""
        x = self._rx.get(int(cpu))
        if x is None:
            return None
        k = int(x[0].searchsorted(hi, "right")) - 1
        return int(x[1][k]) if k >= 0 and x[0][k] >= lo else None

    def sent_after(self, received, hi):
        """The time of the first transmit of another skb on the CPU of a netif_receive_skb (global index
        `received`) after it and up to hi, or None: a packet the receiving protocol sent in response
        before the moment hi (over TCP, the ACK the server's receive sends before it wakes the reader)."""
        x = self._tx.get(int(self._cpu[received]))
        if x is None:
            return None
        a, b = int(x[0].searchsorted(self._ts[received], "right")), int(x[0].searchsorted(hi, "right"))
        other = np.nonzero(x[1][a:b] != self._skb[received])[0]
        return int(x[0][a + other[0]]) if len(other) else None

    def packet_origin(self, i):
        """The first net_dev_xmit of the skb a netif_receive_skb (global index i) carried:
        dict(ts, cpu, tid, dev, hops) or None."""
        j = int(self.pk_idx.searchsorted(i, sorter=self._pos_order))
        if j >= len(self.pk_idx) or self.pk_idx[self._pos_order[j]] != i:
            return None
        k = int(self._pos_order[j])
        skb, origin, hops = self.pk_skb[k], None, 0
        while k > 0:
            k -= 1
            if self.pk_skb[k] != skb or self.pk_ts[k + 1] - self.pk_ts[k] > PACKET_GAP_NS or \
                    self.pk_kind[k] == KIND["copy_to_user"]:
                break
            if self.pk_kind[k] == KIND["net_xmit"]:
                origin = k
                hops += 1
        if origin is None:
            return None
        d = int(self.pk_dev[origin])
        return {"ts": int(self.pk_ts[origin]), "cpu": int(self.pk_cpu[origin]), "tid": int(self.pk_tid[origin]),
                "dev": self._names[d] if d >= 0 else None, "hops": hops}

    def _xmits(self, cpu, lo, hi, tids, same_host):
        """The mask of the net_dev_xmits in [lo, hi] by one of tids on cpu's host (same_host) or on the others
        (the merged view numbers each host's CPUs CPU_STRIDE apart)."""
        host = self.pk_cpu // CPU_STRIDE == cpu // CPU_STRIDE
        return (self.pk_kind == KIND["net_xmit"]) & (host if same_host else ~host) & \
            (self.pk_ts >= lo) & (self.pk_ts <= hi) & np.isin(self.pk_tid, list(tids))

    def first_xmit_on_host(self, cpu, lo, hi, tids):
        """The time of the first net_dev_xmit in [lo, hi] by one of tids on cpu's host, or None."""
        m = self._xmits(cpu, lo, hi, tids, True)
        return int(self.pk_ts[m].min()) if m.any() else None

    def copied_on_host(self, cpu, lo, hi, tids):
        """Whether one of tids copied a packet's data to user space on cpu's host in [lo, hi]; None where
        that host's trace has no such copy at all (its collector does not record them)."""
        host = self._copy_host == cpu // CPU_STRIDE
        if not host.any():
            return None
        m = host & (self._copy_ts >= lo) & (self._copy_ts <= hi) & np.isin(self._copy_tid, list(tids))
        return bool(m.any())

    def xmit_on_other_host(self, cpu, lo, hi, tids):
        """The last net_dev_xmit in [lo, hi] by one of tids on a host other than cpu's: dict(ts, cpu, tid, dev,
        hops) or None."""
        if not self.several_hosts:
            return None
        k = np.nonzero(self._xmits(cpu, lo, hi, tids, False))[0]
        if not len(k):
            return None
        k = int(k[np.argmax(self.pk_ts[k])])
        d = int(self.pk_dev[k])
        return {"ts": int(self.pk_ts[k]), "cpu": int(self.pk_cpu[k]), "tid": int(self.pk_tid[k]),
                "dev": self._names[d] if d >= 0 else None, "hops": 1}

    def packet_links(self):
        """Every hop as arrays (xmit_ts, receive_ts, skb): an xmit linked to the next
        netif_receive_skb of the same skb within PACKET_GAP_NS."""
        k = np.arange(len(self.pk_ts) - 1)
        m = (self.pk_kind[k] == KIND["net_xmit"]) & (self.pk_kind[k + 1] == KIND["net_receive"]) & \
            (self.pk_skb[k] == self.pk_skb[k + 1]) & (self.pk_ts[k + 1] - self.pk_ts[k] <= PACKET_GAP_NS)
        k = k[m]
        return self.pk_ts[k], self.pk_ts[k + 1], self.pk_skb[k]
