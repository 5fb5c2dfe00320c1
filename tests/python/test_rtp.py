"""The round-trip-path walk (analysis/rtp.py) over the execution graph (analysis/graph.py) on hand-built
kernels with known answers (one packet; a request in three IP fragments; two windows with an
acknowledgement), and the retiming that takes the probes out of a path. The committed real run is
test_rtp_real.py's."""
import types

import numpy as np
import pytest

from rpcscope.analysis import rpcs, rpcsteps, rtp
from rpcscope.analysis.graph import Graph
from rpcscope.analysis.timeline import CPU_STRIDE
from rpcscope.analysis.traceread import KIND

CLIENT, SERVER, IDLE = 10, 20, 0
CPU = {CLIENT: 0, SERVER: 1}
ROLES = {CLIENT: "client", SERVER: "server"}


class _Ev:
    """Just enough of traceread.Events for Graph: time-sorted columns and names."""

    def __init__(self, rows, names):
        rows = sorted(rows, key=lambda r: r["ts"])
        cols = dict(ts=np.int64, kind=np.uint8, cpu=np.int16, tid=np.int32, tid2=np.int32, state=np.int64,
                    vec=np.int32, skb=np.uint64, dev=np.int32)
        default = dict(tid2=-1, state=-1, vec=-1, skb=0, dev=-1)
        for c, t in cols.items():
            setattr(self, c, np.array([r.get(c, default.get(c, 0)) for r in rows], t))
        self.names = names


class Sim:
    """A shared kernel with a client (CPU 0) and a server (CPU 1) thread, and the labels
    (step occurrences) the reconstruction would give. Every helper advances the thread's clock."""

    def __init__(self):
        self.rows, self.names = [], ["c0", "s0"]
        self.labels = {CLIENT: [], SERVER: []}
        self.clock = {CLIENT: 0, SERVER: 0}
        self.skb = 0x1000
        # The client runs from before t=0; the server sleeps since -1000.
        self.ev(-2000, CPU[CLIENT], IDLE, "sched_switch", tid2=CLIENT, state=0)
        self.ev(-1000, CPU[SERVER], SERVER, "sched_switch", tid2=IDLE, state=1)

    def ev(self, ts, cpu, tid, kind, **kw):
        self.rows.append(dict(ts=ts, cpu=cpu, tid=tid, kind=KIND[kind], **kw))

    def step(self, tid, name, dur, prio=1):
        t = self.clock[tid]
        self.labels[tid].append((t, t + dur, name, prio))
        self.clock[tid] = t + dur

    def send(self, tid, split, nfrags=1, wakee=None, rx_step=None, ack_at=None):
        """A send syscall: `split` ("C8"/"S9") labels; each IP fragment is an xmit followed by a NET_RX
        softirq in the sender's context (veth); the last one wakes `wakee`. ack_at: that softirq also
        transmits a packet of its own (a TCP ACK) this long after its entry. Returns the waking time."""
        cpu, t = CPU[tid], self.clock[tid]
        dev, peer = (0, 1) if tid == CLIENT else (1, 0)
        self.step(tid, split + "'", 100, 2)
        waking = None
        for k in range(nfrags):
            x = self.clock[tid]
            self.skb += 0x100
            self.ev(x, cpu, tid, "net_xmit", skb=self.skb, dev=dev)
            self.ev(x + 10, cpu, tid, "softirq_entry", vec=3)
            self.ev(x + 20, cpu, tid, "net_receive", skb=self.skb, dev=peer)
            if k == nfrags - 1 and ack_at is not None:
                self.ev(x + 10 + ack_at, cpu, tid, "net_xmit", skb=self.skb + 0x10, dev=peer)
            if k == nfrags - 1 and wakee is not None:
                waking = x + 100
                self.ev(waking, cpu, tid, "sched_waking", tid2=wakee, vec=CPU[wakee])
                self.labels[tid].append((x + 10, waking, rx_step, 3))
            self.ev(x + 150, cpu, tid, "softirq_exit", vec=3)
            self.clock[tid] = x + 200
        self.labels[tid].append((t + 100, self.clock[tid], split + "''", 2))
        return waking

    def sleep(self, tid, name):
        """The step that ends with the switch out (C14/S14)."""
        self.step(tid, name, 50)
        self.ev(self.clock[tid], CPU[tid], tid, "sched_switch", tid2=IDLE, state=1)

    def resume(self, tid, waking, latency, name):
        t_in = waking + latency
        assert t_in > self.clock[tid]
        self.ev(t_in, CPU[tid], IDLE, "sched_switch", tid2=tid, state=0)
        self.labels[tid].append((waking, t_in, name, 1))
        self.clock[tid] = t_in

    def graph(self):
        return Graph(_Ev(self.rows, self.names), threads=[CLIENT, SERVER])

    def walk(self):
        labels = {t: rtp._Labels(v) for t, v in self.labels.items()}
        segs, probs = rtp.walk(self.graph(), labels, CLIENT, 0, self.clock[CLIENT], ROLES)
        occs = {}
        for t, v in self.labels.items():
            for b, e, n, _ in v:
                occs.setdefault(n, []).append((b, e, t))
        return segs, probs, occs


def _names(segs):
    return [s[0] for s in segs]


def _check_contiguous(segs, begin, end):
    assert segs[0][1] == begin and segs[-1][2] == end
    for a, b in zip(segs, segs[1:]):
        assert a[2] == b[1], (a, b)
    assert sum(e - b for _, b, e, _, _ in segs) == end - begin


def _one_packet_call(sim, nfrags=1):
    for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        sim.step(CLIENT, s, 100)
    w1 = sim.send(CLIENT, "C8", nfrags=nfrags, wakee=SERVER, rx_step="S1")
    sim.step(CLIENT, "C9", 50)
    sim.step(CLIENT, "C11", 50)
    sim.sleep(CLIENT, "C14")
    sim.resume(SERVER, w1, 500, "S2")
    for s in ("S3", "S4", "S5", "S6", "S7", "S8"):
        sim.step(SERVER, s, 100)
    w2 = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")
    sim.step(SERVER, "S10", 50)
    sim.step(SERVER, "S11", 50)
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, w2, 700, "C16")
    for s in ("C17", "C18", "C19", "C20", "C21"):
        sim.step(CLIENT, s, 100)
    return w1, w2


def test_single_packet_path_and_slack():
    sim = Sim()
    w1, w2 = _one_packet_call(sim)
    segs, probs, occs = sim.walk()
    assert probs == []
    end = sim.clock[CLIENT]
    _check_contiguous(segs, 0, end)
    assert _names(segs) == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8'", "C8''", "S1", "S2", "S3", "S4", "S5",
                            "S6", "S7", "S8", "S9'", "S9''", "C15", "C16", "C17", "C18", "C19", "C20", "C21"]
    d = {n: e - b for n, b, e, _, _ in segs}
    assert d["C8''"] == 10 and d["S1"] == 90 and d["S2"] == 500 and d["C15"] == 90 and d["C16"] == 700
    sl = rtp.slack(occs, segs, end)
    # Client: C9..C14 and the rest of C8'' end at the switch out; the path needs the client at the waking.
    client_idle = [b for b, _, n, _ in sim.labels[CLIENT] if n == "C14"][0] + 50
    for s in ("C9", "C11", "C14", "C8''"):
        assert sl[s][1] == w2 - client_idle
    assert sl["C9"][0] == 50 and sl["C8''"][0] == 200 - 10 - 90
    # Server tail: never needed again in this call: slack to the call end.
    server_idle = [b for b, _, n, _ in sim.labels[SERVER] if n == "S14"][0] + 50
    for s in ("S10", "S11", "S14"):
        assert sl[s][1] == end - server_idle
    assert "C1" not in sl and "S4" not in sl
    assert all(v[1] >= 0 for v in sl.values())


@pytest.mark.parametrize("ack_at, split", [(30, True), (120, False)])
def test_an_ack_sent_before_the_wake_up_is_its_own_segment(ack_at, split):
    """Over TCP the server's receive ACKs a request of two or more segments at once: before it wakes the
    server on tcp_rcv_established's fast path (on the path, its own segment, cut out of S1), after it on
    the slow path (beside the path: S1 whole). The request's own hops (same skb) never split it."""
    sim = Sim()
    for st in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        sim.step(CLIENT, st, 100)
    x = sim.clock[CLIENT] + 100                       # the request's xmit (after C8')
    w1 = sim.send(CLIENT, "C8", wakee=SERVER, rx_step="S1", ack_at=ack_at)
    sim.sleep(CLIENT, "C14")
    sim.resume(SERVER, w1, 500, "S2")
    sim.step(SERVER, "S3", 100)
    w2 = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, w2, 700, "C16")
    sim.step(CLIENT, "C21", 100)
    segs, probs, _ = sim.walk()
    assert probs == []
    _check_contiguous(segs, 0, sim.clock[CLIENT])
    d = {n: (b, e) for n, b, e, _, _ in segs}
    ack = "server " + rtp.SENT_BEFORE_WAKEUP
    if split:
        assert _names(segs)[_names(segs).index("S1"):][:3] == ["S1", ack, "S2"]
        assert d["S1"] == (x + 10, x + 10 + ack_at) and d[ack] == (x + 10 + ack_at, w1)
    else:
        assert ack not in d and d["S1"] == (x + 10, w1)
    assert "client " + rtp.SENT_BEFORE_WAKEUP not in d      # the reply's receive sent nothing


def test_three_fragments_only_the_last_wakes_the_server():
    sim = Sim()
    _one_packet_call(sim, nfrags=3)
    segs, probs, _ = sim.walk()
    assert probs == []
    _check_contiguous(segs, 0, sim.clock[CLIENT])
    names = _names(segs)
    assert names[:10] == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8'", "C8''", "S1"]
    assert "network" not in names and names.count("S1") == 1
    d = {n: e - b for n, b, e, _, _ in segs}
    # C8'' on the path: the first two fragments (their softirqs included) and the third up to its softirq.
    assert d["C8''"] == 2 * 200 + 10


def test_two_windows_with_an_ack():
    sim = Sim()
    for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        sim.step(CLIENT, s, 100)
    w1 = sim.send(CLIENT, "C8", wakee=SERVER, rx_step="S1")
    sim.sleep(CLIENT, "C14")
    sim.resume(SERVER, w1, 400, "S2")
    for s in ("S3", "S4", "S16", "S15", "S8"):
        sim.step(SERVER, s, 100)
    wa = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")       # the window acknowledgement
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, wa, 600, "C16")
    for s in ("C17", "C18", "C22", "C7"):
        sim.step(CLIENT, s, 100)
    w2 = sim.send(CLIENT, "C8", nfrags=2, wakee=SERVER, rx_step="S1")   # the second window
    sim.sleep(CLIENT, "C14")
    sim.resume(SERVER, w2, 300, "S2")
    for s in ("S3", "S4", "S16", "S5", "S6", "S7", "S8"):
        sim.step(SERVER, s, 100)
    w3 = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")       # the reply
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, w3, 800, "C16")
    for s in ("C17", "C18", "C19", "C20", "C21"):
        sim.step(CLIENT, s, 100)
    segs, probs, occs = sim.walk()
    assert probs == []
    _check_contiguous(segs, 0, sim.clock[CLIENT])
    names = _names(segs)
    assert names == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8'", "C8''", "S1", "S2", "S3", "S4", "S16", "S15",
                     "S8", "S9'", "S9''", "C15", "C16", "C17", "C18", "C22", "C7", "C8'", "C8''", "S1", "S2", "S3",
                     "S4", "S16", "S5", "S6", "S7", "S8", "S9'", "S9''", "C15", "C16", "C17", "C18", "C19", "C20",
                     "C21"]
    sl = rtp.slack(occs, segs, sim.clock[CLIENT])
    assert set(sl) >= {"C14", "S14", "C8''", "S9''"} and all(v[1] >= 0 for v in sl.values())


def test_a_waking_that_races_the_server_going_to_sleep():
    """The client's fragment wakes the server a moment after it entered its wait and before its switch
    out (try_to_wake_up waits for it to leave the CPU), and the switch back in is not recorded (this
    VM's CPU 1): the path still goes from the server's return through the waking into the client's
    send, not through a block with no waking on the server's own thread."""
    sim = Sim()
    sim.ev(-500, CPU[SERVER], IDLE, "sched_switch", tid2=SERVER, state=0)
    for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        sim.step(CLIENT, s, 100)
    sim.ev(850, CPU[SERVER], SERVER, "syscall_entry")                 # epoll_wait
    w1 = sim.send(CLIENT, "C8", wakee=SERVER, rx_step="S1")
    out = w1 + 50
    sim.ev(out, CPU[SERVER], SERVER, "sched_switch", tid2=IDLE, state=1)
    back = out + 450
    sim.ev(back, CPU[SERVER], SERVER, "syscall_exit")                 # the switch in itself is lost
    sim.labels[SERVER].append((w1, back, "S2", 1))
    sim.clock[SERVER] = back
    sim.step(CLIENT, "C9", 50)
    sim.sleep(CLIENT, "C14")
    for s in ("S3", "S4", "S5", "S6", "S7", "S8"):
        sim.step(SERVER, s, 100)
    w2 = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, w2, 700, "C16")
    sim.step(CLIENT, "C21", 100)
    g = sim.graph()
    assert g.wakeup_before(SERVER, back, out) is None
    assert g.waking_while_going_to_sleep(SERVER, out)["ts"] == w1
    assert g.waking_while_going_to_sleep(SERVER, -1000) is None
    segs, probs, _ = sim.walk()
    assert probs == []
    _check_contiguous(segs, 0, sim.clock[CLIENT])
    names = _names(segs)
    assert not any("no waking" in n for n in names), names
    assert names[:11] == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8'", "C8''", "S1", "S2"]
    assert {n: (b, e) for n, b, e, _, _ in segs}["S2"] == (w1, back)
    # The timeline and the retime see the same race: the block is all wake-up latency after the switch
    # out. A probe in the client's C2 (40 ns) makes its send earlier, but the server only comes back
    # 450 ns after its own switch out, so that saving is absorbed; the server's own (60 ns) is not.
    assert ("wakeup" in [st for b, e, st in g.states(SERVER, 0, sim.clock[CLIENT]) if b == out])
    costs = _EventCosts({CPU[CLIENT]: [(150, 40.0)], CPU[SERVER]: [(back + 150, 60.0)]})
    assert rtp.retime(g, costs, ROLES, CLIENT, 0, sim.clock[CLIENT]) == pytest.approx(60.0)


class _KernelEv(_Ev):
    """_Ev with the syscall-name column rpcs._Kernel reads (a row's "name": its syscall)."""

    def __init__(self, rows):
        self._names = sorted({kw["name"] for *_, kw in rows if "name" in kw})
        super().__init__([dict(ts=t, cpu=c, tid=tid, kind=KIND[k], **{x: v for x, v in kw.items() if x != "name"})
                          for t, c, tid, k, kw in rows], [])
        self.name = np.array([self.name_id(kw.get("name")) for *_, kw in rows], np.int32)

    def name_id(self, name):
        return self._names.index(name) if name in self._names else -1


def test_the_reconstruction_takes_a_waking_that_races_the_going_to_sleep():
    """rpcs._wake, on the same pattern: the waking before the switch out, the switch in lost."""

    rows = [
        (-500, 1, IDLE, "sched_switch", dict(tid2=SERVER, state=0)),
        (850, 1, SERVER, "syscall_entry", {}),
        (810, 0, CLIENT, "softirq_entry", dict(vec=3)),
        (900, 0, CLIENT, "sched_waking", dict(tid2=SERVER)),
        (950, 0, CLIENT, "softirq_exit", dict(vec=3)),
        (960, 1, SERVER, "sched_switch", dict(tid2=IDLE, state=1)),
        (1400, 1, SERVER, "syscall_exit", {}),
    ]
    w = rpcs._wake(rpcs._Kernel(_KernelEv(rows)), np.array([SERVER]), np.array([0]), np.array([1500]))
    assert w.out.ts.tolist() == [960] and w.wk.ts.tolist() == [900]
    assert w.sw_in.ts.tolist() == [1400] and w.inferred.tolist() == [True]
    assert w.sirq.ts.tolist() == [810] and w.reason.tolist() == [None]


def test_a_fragment_not_waited_for_leaves_the_call_complete():
    """rpcs._sleeps: the listener sleeps for the first fragment of call 0 (woken inside the client's
    NET_RX softirq, which began before the listener's previous user event at 50), and its blocking wait
    for the second returns at once: no S1/S2 for that one, and call 0 is not failed for it. Call 1's
    only wait did not sleep either: that call waited nowhere (no_wait), which is no failure; without
    `absent` (--wait recv) it fails with the reason."""
    rows = [
        (20, 0, CLIENT, "softirq_entry", dict(vec=3)),
        (100, 1, SERVER, "sched_switch", dict(tid2=IDLE, state=1)),
        (350, 0, CLIENT, "sched_waking", dict(tid2=SERVER)),
        (400, 0, CLIENT, "softirq_exit", dict(vec=3)),
        (500, 1, SERVER, "syscall_exit", {}),
        (650, 1, SERVER, "syscall_entry", {}),
        (700, 1, SERVER, "syscall_exit", {}),
        (1100, 1, SERVER, "syscall_entry", {}),
        (1150, 1, SERVER, "syscall_exit", {}),
    ]
    ctx = types.SimpleNamespace(K=rpcs._Kernel(_KernelEv(rows)), n=2)
    not_taken = "not taken"
    w, fail, _ = rpcs._sleeps(ctx, np.array([0, 0, 1]), np.array([SERVER] * 3), np.array([50, 600, 1000]),
                              np.array([550, 900, 1300]), np.zeros(3, bool), not_taken, "none",
                              absent=("did not sleep", not_taken))
    assert fail.tolist() == [None, None]
    assert w.no_wait.tolist() == [False, True]
    assert w.absent.tolist() == [False, True, True]
    assert [a.tolist() for a in w.resume[:3]] == [[0], [350], [500]]
    assert [a.tolist() for a in w.softirq[:3]] == [[0], [20], [350]]
    w, fail, _ = rpcs._sleeps(ctx, np.array([0, 0, 1]), np.array([SERVER] * 3), np.array([50, 600, 1000]),
                              np.array([550, 900, 1300]), np.zeros(3, bool), not_taken, "none")
    assert fail.tolist() == ["did not sleep", "did not sleep"] and w.no_wait.tolist() == [False, False]


def test_a_reply_not_waited_for_leaves_the_call_whole():
    """The client's side (select mode): call 0 sleeps for its reply; call 1's blocking wait returns at
    once (the reply came as it entered it); call 2 has no C14 marks (the reply was there at the
    non-blocking select). Calls 1 and 2 are whole: C14-C16 do not apply to them, C17 is measured for
    call 1 (the blocking wait's return) and does not apply to call 2."""
    rows = [
        (100, 1, CLIENT, "sched_switch", dict(tid2=IDLE, state=1)),
        (300, 0, SERVER, "softirq_entry", dict(vec=3)),
        (350, 0, SERVER, "sched_waking", dict(tid2=CLIENT)),
        (400, 0, SERVER, "softirq_exit", dict(vec=3)),
        (500, 1, CLIENT, "syscall_exit", dict(name="epoll_wait")),
        (1100, 1, CLIENT, "syscall_entry", dict(name="epoll_wait")),
        (1150, 1, CLIENT, "syscall_exit", dict(name="epoll_wait")),
    ]
    names = ("C14", "C15", "C16", "C17", "C14-C17")
    ctx = types.SimpleNamespace(K=rpcs._Kernel(_KernelEv(rows)), n=3, cond={"client": set()},
                                rows={k: rpcs.Row(k, 3) for k in names})
    # What reconstruct has put by then: the client's wait from user marks, none for call 2.
    rpcs._put(ctx, "C14-C17", (np.array([0, 1]), np.array([50, 1000]), np.array([600, 1200]), np.array([1, 1])),
              np.array([None, None, rpcs.NOT_TAKEN_REPLY], object))
    q = np.array([0, 1])
    ctx._to_next_end = (q, np.array([50, 1000]), None, np.array([600, 1200]), np.array([1, 1]), np.ones(2, bool))
    orig_to, orig_sends = rpcsteps._to_next_end, rpcsteps._sends      # the rules' module looks them up
    rpcsteps._to_next_end = lambda c, a, b: c._to_next_end
    rpcsteps._sends = lambda *a: None
    try:
        rpcs._client_kernel(ctx, np.array([CLIENT] * 3))
    finally:
        rpcsteps._to_next_end, rpcsteps._sends = orig_to, orig_sends
    st = {k: ctx.rows[k].status.tolist() for k in names}
    M, NA, X = rpcs.MEASURED, rpcs.NOT_APPLICABLE, rpcs.MISSING
    assert st["C14"] == st["C15"] == st["C16"] == [M, NA, NA], st
    assert st["C17"] == [M, M, NA], st
    assert st["C14-C17"] == [M, M, NA] and X not in sum(st.values(), [])
    assert not ctx.rows["C14-C17"].reasons
    assert ctx.rows["C17"].dur.tolist()[:2] == [100.0, 50.0]
    assert ctx.rows["C14"].why.tolist()[1:] == ["the reply was there before the client waited"] * 2
    assert not ctx.rows["C14"].reasons


def test_graph_states_and_links():
    sim = Sim()
    w1, w2 = _one_packet_call(sim)
    g = sim.graph()
    st = g.states(SERVER, 0, sim.clock[CLIENT])
    kinds = [s for _, _, s in st]
    assert kinds[:3] == ["blocked", "wakeup", "running"]
    assert st[0][1] == w1 and st[1] == (w1, w1 + 500, "wakeup")
    assert any(s.startswith("interrupted (softirq NET_RX)") for s in kinds)
    w = g.wakeup_before(CLIENT, w2 + 700, 0)
    assert w["ts"] == w2 and w["waker"] == SERVER and w["context"] == "softirq NET_RX"
    xs, rs, skbs = g.packet_links()
    assert len(xs) == 2 and all(r > x for x, r in zip(xs, rs))
    assert g.current(CPU[CLIENT], w2 + 699) == IDLE and g.current(CPU[CLIENT], w2 + 700) == CLIENT


def test_executor_handoff_is_a_task_wakeup():
    LISTENER = 30
    CPU[LISTENER] = 2
    try:
        sim = Sim()
        sim.labels[LISTENER] = []
        sim.clock[LISTENER] = 0
        sim.ev(-1000, 2, LISTENER, "sched_switch", tid2=IDLE, state=1)
        for st in ("C1", "C7"):
            sim.step(CLIENT, st, 100)
        w1 = sim.send(CLIENT, "C8", wakee=LISTENER, rx_step="S1")
        sim.sleep(CLIENT, "C14")
        sim.resume(LISTENER, w1, 400, "S2")
        sim.step(LISTENER, "S4", 100)
        sim.step(LISTENER, "S5", 100)
        h = sim.clock[LISTENER]
        sim.ev(h, 2, LISTENER, "sched_waking", tid2=SERVER, vec=1)      # futex wake of the executor
        sim.step(LISTENER, "S12", 100)
        sim.sleep(LISTENER, "S14")
        sim.ev(h + 300, 1, IDLE, "sched_switch", tid2=SERVER, state=0)
        sim.clock[SERVER] = h + 300
        sim.step(SERVER, "S6", 100)
        w2 = sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15")
        sim.sleep(SERVER, "S14")
        sim.resume(CLIENT, w2, 500, "C16")
        sim.step(CLIENT, "C21", 100)
        labels = {t: rtp._Labels(v) for t, v in sim.labels.items()}
        g = Graph(_Ev(sim.rows, sim.names), threads=[CLIENT, SERVER, LISTENER])
        segs, probs = rtp.walk(g, labels, CLIENT, 0, sim.clock[CLIENT], {**ROLES, LISTENER: "server"})
        assert probs == []
        _check_contiguous(segs, 0, sim.clock[CLIENT])
        assert _names(segs) == ["C1", "C7", "C8'", "C8''", "S1", "S2", "S4", "S5", "wakeup latency (task)", "S6",
                                "S9'", "S9''", "C15", "C16", "C21"]
    finally:
        del CPU[LISTENER]


def test_preempted_time_is_on_the_path():
    sim = Sim()
    sim.step(CLIENT, "C1", 100)
    sim.ev(100, 0, CLIENT, "sched_switch", tid2=99, state=0)       # preempted by another task
    sim.ev(400, 0, 99, "sched_switch", tid2=CLIENT, state=1)
    sim.clock[CLIENT] = 400
    sim.step(CLIENT, "C2", 100)
    segs, probs, _ = sim.walk()
    assert _names(segs) == ["C1", "preempted", "C2"] and probs == []


class _EventCosts:
    """The probe costs of rpcs._Costs for a hand-built kernel: {cpu: [(ts, ns)]}, charged per interval."""

    def __init__(self, events):
        self.events = events

    def charge(self, cpu, b, e):
        cost = np.array([sum(ns for ts, ns in self.events.get(int(c), ()) if lo <= ts < hi)
                         for c, lo, hi in zip(cpu, b, e)], float)
        return cost, np.array([sum(1 for ts, _ in self.events.get(int(c), ()) if lo <= ts < hi)
                               for c, lo, hi in zip(cpu, b, e)])


def _overlapped_call(client_sleeps_before_reply):
    """A one-packet call whose client, after its send, works beside the path (C9) until this long
    before the reply wakes it; the server's work on the path (S3 .. S8, 1200 ns) holds twelve probe
    events of 100 ns. Returns the sim, the reply's waking and the costs."""
    sim = Sim()
    for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        sim.step(CLIENT, s, 100)
    w1 = sim.send(CLIENT, "C8", wakee=SERVER, rx_step="S1")
    sim.resume(SERVER, w1, 500, "S2")
    t0 = sim.clock[SERVER]
    for s in ("S3", "S4", "S5", "S6", "S7", "S8"):
        sim.step(SERVER, s, 200)
    probes = [(t0 + 100 * k + 50, 100.0) for k in range(12)]
    # The reply's waking comes 100 ns into the send's NET_RX softirq after its 100-ns sendmsg'.
    w2 = sim.clock[SERVER] + 200
    sim.step(CLIENT, "C9", w2 - client_sleeps_before_reply - 50 - sim.clock[CLIENT])
    sim.sleep(CLIENT, "C14")
    assert sim.send(SERVER, "S9", wakee=CLIENT, rx_step="C15") == w2
    sim.sleep(SERVER, "S14")
    sim.resume(CLIENT, w2, 700, "C16")
    for s in ("C17", "C18", "C19", "C20", "C21"):
        sim.step(CLIENT, s, 100)
    return sim, w2, _EventCosts({CPU[SERVER]: probes})


@pytest.mark.parametrize("slack, absorbed", [(1500, 0), (1200, 0), (500, 1200 - 500), (200, 1200 - 200), (0, 1200)])
def test_retime_takes_the_probes_out_with_the_dependencies_kept(slack, absorbed):
    """The walked path charges the server's 1200 ns of probes; without them the reply comes 1200 ns
    sooner, but the client still has to finish its own work (C9, no probes) before it waits: where its
    slack is less than the probes, its branch joins the path and the call loses only the slack of
    them, min(pA, s + pB) with pB = 0 (the rest was absorbed by the overlap)."""
    sim, w2, costs = _overlapped_call(slack)
    segs, probs, occs = sim.walk()
    assert probs == [] and "C9" not in _names(segs)
    path = sum(costs.charge(np.array([s[4]]), np.array([s[1]]), np.array([s[2]]))[0][0]
               for s in segs if s[4] is not None)
    assert path == 1200
    got = rtp.retime(sim.graph(), costs, ROLES, CLIENT, 0, sim.clock[CLIENT])
    assert got == pytest.approx(path - absorbed)
    assert rtp.slack(occs, segs, sim.clock[CLIENT])["C9"][1] == slack


def test_retime_of_a_call_without_overlap_is_the_path_probe_cost():
    """Probe events on both sides of a one-packet call, the client asleep long before the reply: the
    dependencies give back exactly the walked path's probe cost."""
    sim = Sim()
    _one_packet_call(sim)
    segs, probs, _ = sim.walk()
    evs = {c: [(s[1] + 10 * k, 25.0) for s in segs if s[4] == c for k in range(2)] for c in CPU.values()}
    costs = _EventCosts(evs)
    path = sum(costs.charge(np.array([s[4]]), np.array([s[1]]), np.array([s[2]]))[0][0]
               for s in segs if s[4] is not None)
    assert path > 0
    assert rtp.retime(sim.graph(), costs, ROLES, CLIENT, 0, sim.clock[CLIENT]) == pytest.approx(path)


@pytest.mark.parametrize("reply_at, linked", [(400, True), (250, False), (50, False)])
def test_a_reply_the_merged_clock_puts_before_its_request_was_read_is_not_linked(reply_at, linked):
    """Two kernels, one merged clock: the client hands its request to its device at 100, the server copies
    it to user space at 300 and sends its reply at reply_at, the client's NET_RX softirq runs at 600. A
    reply mapped before the server read the request (250), or before the request left (50), is the
    clock's error: the softirq's packet is not linked to it."""
    s = CPU_STRIDE
    rows = [dict(ts=100, cpu=0, tid=CLIENT, kind=KIND["net_xmit"], skb=0x10, dev=0),
            dict(ts=300, cpu=s, tid=SERVER, kind=KIND["copy_to_user"], skb=0x20),
            dict(ts=reply_at, cpu=s, tid=SERVER, kind=KIND["net_xmit"], skb=0x30, dev=1),
            dict(ts=600, cpu=0, tid=IDLE, kind=KIND["softirq_entry"], vec=3),
            dict(ts=610, cpu=0, tid=IDLE, kind=KIND["net_receive"], skb=0x40, dev=0),
            dict(ts=650, cpu=0, tid=IDLE, kind=KIND["sched_waking"], tid2=CLIENT, vec=0),
            dict(ts=700, cpu=0, tid=IDLE, kind=KIND["softirq_exit"], vec=3)]
    g = Graph(_Ev(rows, ["c0", "s0"]), threads=[CLIENT, SERVER])
    assert g.several_hosts
    _, org, _, _ = rtp._softirq_sender(g, {"softirq": (600, 700), "cpu": 0, "ts": 650}, ROLES, 0)
    assert (org is not None and org["ts"] == reply_at and org["tid"] == SERVER) == linked, org
