"""The round-trip-path walk (analysis/rtp.py) over the execution graph (analysis/graph.py):
hand-built kernels with known answers (one packet; a request in three IP fragments; two
windows with an acknowledgement), and the committed real run (fixtures/run-udp-small)."""
import json
import pathlib
import shutil

import numpy as np
import pytest

from rpcscope.analysis import rtp
from rpcscope.analysis.graph import Graph
from rpcscope.analysis.model_input import observations
from rpcscope.analysis.traceread import KIND

RUN = pathlib.Path(__file__).parent / "fixtures" / "run-udp-small"
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
    from rpcscope.analysis import rpcs

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
    import types

    from rpcscope.analysis import rpcs
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
    import types

    from rpcscope.analysis import rpcs, rpcsteps
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


# ---------------------------------------------------------------- the committed real run

@pytest.fixture(scope="module")
def real(tmp_path_factory):
    d = tmp_path_factory.mktemp("rtp") / "run"
    shutil.copytree(RUN, d, ignore=shutil.ignore_patterns("analysis"))
    return rtp.analyze_rtp(d, per_rpc=True), d


def test_real_run_sums_to_rtt(real):
    out, d = real
    assert (d / "analysis" / "rtp.json").exists()
    for c in out["cases"]:
        assert c["walked"] == c["rpcs"] > 0
        for p in c["per_rpc"]:
            assert abs(p["sum_ns"] - p["rtt_ns"]) <= 1000


def test_real_run_steps_on_the_path(real):
    out, _ = real
    for c in out["cases"]:
        for p in c["per_rpc"]:
            on = {s[0] for s in p["segments"]}
            for s in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C18", "C19", "C20", "C21"):
                assert s in on, (c["case"], s)
            if c["size"] == 0:        # a one-packet call: the server's receive .. send is on the path
                for s in ("S4", "S5", "S6", "S7", "S8", "S9'"):
                    assert s in on, (c["case"], s)
            for name, (off, sl) in p["slack"].items():
                assert sl >= 0 and off > 0
        # Overlapped as in DCE's Figure 5 (here every RPC): the client's C9-C14, the server's S10-S14.
        over = {r["step"] for r in c["overlapped"]}
        assert {"C9", "C10", "C11", "C14", "S10", "S11", "S14"} <= over
        path = {r["segment"]: r for r in c["path"]}
        assert path["C16"]["on_path_frac"] == 1.0 and path["S2"]["on_path_frac"] == 1.0

def test_path_counts_occurrences_not_pieces():
    """The client's send of one fragment (C8'') holds the server's receive softirq (S1) on veth, and
    the path passes through it in two pieces: one occurrence. A second fragment's send is a second; a
    segment no occurrence holds (C16, from the waking to the switch in) counts once a piece."""
    occs = {"C8''": [(0, 30, 1), (50, 60, 1)], "S1": [(10, 20, 2)]}
    segs = [("C8''", 0, 10, 1, 0), ("S1", 10, 20, 2, 0), ("C8''", 20, 30, 1, 0), ("C8''", 50, 60, 1, 0),
            ("C16", 70, 80, 1, 1), ("C16", 90, 95, 1, 1)]
    assert rtp.path_occurrences(occs, segs) == {"C8''": 2, "S1": 1, "C16": 2}


def test_call_edges_only_when_every_call_of_the_traced_run_was_walked():
    """The client's clock spans the call beyond C1 .. C21; its p50 minus the walked p50 is that time,
    if the two are of the same calls. Three calls of 1000, 1100, 1200 ns walked, 1150 ns by the clock."""
    def res(calls):
        per = [{"call_id": i, "rtt_ns": r, "sum_ns": r, "probe_ns": 100.0, "path_events": (1, 0, 0), "ok": True,
                "segments": [("C1", 0, r, 100.0)], "slack": {}} for i, r in enumerate((1000, 1100, 1200))]
        return {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 3, "walked": 3,
                "problems": {}, "per_rpc": per, "untraced_p50_ns": 1000, "traced": {"p50": 1150, "calls": calls}}
    agg = rtp.aggregate(res(3))
    assert agg["call_edges_ns"] == 50.0 and agg["rtt_median_ns"] == 1100.0
    assert agg["rtt_corrected_median_ns"] == 1050.0                  # 1100 - 100 of probes + 50
    assert agg["path"][0]["segment"] == rtp.CALL_EDGES and agg["path"][0]["typical_corrected_ns"] == 50.0
    assert sum(r["typical_ns"] for r in agg["path"]) == agg["typical"]["rtt_mean_ns"]
    agg = rtp.aggregate(res(2000))                                   # a sample of a longer run: no edges
    assert agg["call_edges_ns"] is None and agg["rtt_corrected_median_ns"] == 1000.0
    assert rtp.CALL_EDGES not in {r["segment"] for r in agg["path"]}


def test_the_typical_call_of_a_bimodal_run_lies_in_the_median_calls_mode():
    """A capture's traced UDP null call: 55 % of its calls on the short path (server
    wake-up S2 2.8 us), 45 % on one with interrupt-borne wake-ups (S2 15.8 us, 13 us longer). The
    40th-60th percentile band took both modes; the fifth of the RPCs nearest the median takes the
    median call's, and its mean RTT sits at the median."""
    per = []
    for i in range(1000):
        long = i % 20 >= 11                                   # 9 of every 20: 45 %
        s2 = 15800 if long else 2800 + (i % 7) * 10
        per.append({"call_id": i, "rtt_ns": 10000 + s2, "sum_ns": 10000 + s2, "probe_ns": 0.0,
                    "path_events": (1, 0, 0), "ok": True, "slack": {},
                    "segments": [("C1", 0, 10000, 0.0), ("S2", 10000, s2, 0.0)]})
    res = {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 1000, "walked": 1000,
           "problems": {}, "per_rpc": per, "untraced_p50_ns": 12800, "traced": {"p50": 12830, "calls": 5000}}
    agg = rtp.aggregate(res)
    s2 = next(r for r in agg["path"] if r["segment"] == "S2")
    assert agg["typical"]["rpcs"] == 200 and s2["typical_ns"] < 2900
    assert abs(agg["typical"]["rtt_mean_ns"] - agg["rtt_median_ns"]) < 50
    # the old band: the 40th-60th percentiles straddle the modes
    corr = np.array([p["rtt_ns"] for p in per], float)
    lo, hi = np.percentile(corr, (40, 60))
    assert np.mean([p["segments"][1][2] for p, c in zip(per, corr) if lo <= c <= hi]) > 4000


def _split_rpc(jitter=0):
    """One RPC's path as analyze_case records it, (label, offset, duration, in-place charge, user events,
    kernel events), at 200 ns a user event and 150 ns a kernel one: two steps of one user tracepoint and
    no code (90 and 95 ns traced), a step with code and one user tracepoint (C5: 400 ns), a step of one
    kernel event (S3: 120 ns), a kernel step with two kernel events and a user one (C8': 2000 ns), a
    wake-up with no event (S2: 3000 ns)."""
    return [("C1", 0, 90 + jitter, 200.0, 1, 0), ("C2", 90, 95, 200.0, 1, 0), ("C5", 185, 400, 200.0, 1, 0),
            ("S3", 585, 120, 150.0, 0, 1), ("C8'", 705, 2000, 500.0, 1, 2), ("S2", 2705, 3000, 0.0, 0, 0)]


def test_an_events_cost_beyond_its_own_step_is_spread_over_the_path():
    """The emptiest one-tracepoint step of each class sets the direct cost of its events (user: 90 ns,
    C1's mean; kernel: 120 ns, S3's); the rest of each event's cost (110 ns x 4 user events, 30 ns x 3
    kernel events) is taken off the segments in proportion to the time they keep after their direct
    charges. No step comes out below zero, the total charge is the in-place one, and every segment's
    kept time shrinks by the same factor."""
    per = [{"segments": _split_rpc(jitter=(i % 3) - 1)} for i in range(9)]   # C1: 89, 90, 91 ns
    split = rtp.probe_split(per)
    assert split == {"user": {"event_ns": 200.0, "direct_ns": 90.0, "direct_from": "C1"},
                     "kernel": {"event_ns": 150.0, "direct_ns": 120.0, "direct_from": "S3"}}
    segs = _split_rpc()
    taken = rtp.split_charges(segs, split)
    assert sum(taken) == pytest.approx(sum(s[3] for s in segs))               # 1250 ns either way
    kept = [s[2] - t for s, t in zip(segs, taken)]
    assert min(kept) >= 0 and kept[0] == pytest.approx(0.0) and kept[3] == pytest.approx(0.0)
    # left after direct charges: C2 5, C5 310, C8' 1670 (2000 - 90 - 2 x 120), S2 3000 ns; the spread,
    # 4 x 110 + 3 x 30 = 530 ns, takes 530 / 4985 of each
    factor = 1 - 530 / 4985
    assert [kept[i] for i in (1, 2, 4, 5)] == pytest.approx([5 * factor, 310 * factor, 1670 * factor, 3000 * factor])
    # the in-place rule had C2 at 95 - 200 = -105 ns, S3 at -30 and S2 at all of its 3000
    assert [s[2] - s[3] for s in segs][:4] == [-110, -105, 200, -30]


def test_no_split_without_event_counts_a_one_event_step_or_one_cost():
    """Segments recorded without their event counts (older per-RPC data, hand-built paths): no split.
    A class with no catalog step holding one of its events alone in half the RPCs, or whose events
    cost differently (a loopback calibration's cost per kernel event name), is charged in place."""
    old = [{"segments": [("C1", 0, 90, 200.0)]}]
    assert rtp.probe_split(old) is None
    assert rtp.split_charges(old[0]["segments"], None) == [200.0]
    busy = [{"segments": [("C5", 0, 400, 400.0, 2, 0), ("S2", 400, 3000, 0.0, 0, 0)]}]
    assert rtp.probe_split(busy) == {"user": None, "kernel": None}
    assert rtp.split_charges(busy[0]["segments"], rtp.probe_split(busy)) == [400.0, 0.0]
    seldom = [{"segments": _split_rpc()} if i < 4 else
              {"segments": [("C5", 0, 400, 200.0, 1, 0), ("S3", 400, 130, 160.0, 0, 1)]} for i in range(10)]
    split = rtp.probe_split(seldom)
    assert split["user"]["direct_from"] == "C5"     # C1 and C2 alone in 4 of 10 RPCs: under the share
    assert split["user"]["direct_ns"] == 200.0      # C5 takes more than an event's whole cost: no split
    assert split["kernel"] is None                  # S3's one event cost 150 ns in some RPCs, 160 in others


def test_the_typical_path_with_the_split():
    """aggregate: each segment's typical corrected time by the split, the in-place charge's median kept
    beside it (probe_median_ns) and what was taken off (typical_probe_ns); the corrected path sums to
    the traced one less every event's calibrated cost, as before."""
    per = [{"call_id": i, "rtt_ns": 5705, "sum_ns": 5705, "probe_ns": 1250.0, "path_events": (4, 3, 0),
            "ok": True, "slack": {}, "segments": _split_rpc()} for i in range(5)]
    res = {"case": "udp-maxarg-0", "transport": "udp", "proc": "maxarg", "size": 0, "rpcs": 5, "walked": 5,
           "problems": {}, "per_rpc": per, "untraced_p50_ns": 4500, "traced": {"p50": 5705, "calls": 5000}}
    agg = rtp.aggregate(res)
    rows = {r["segment"]: r for r in agg["path"]}
    assert agg["probe_split"]["user"]["direct_ns"] == 90.0 and agg["probe_split"]["kernel"]["direct_ns"] == 120.0
    assert rows["C1"]["typical_corrected_ns"] == pytest.approx(0.0)
    assert rows["C1"]["probe_median_ns"] == 200.0 and rows["C1"]["typical_probe_ns"] == pytest.approx(90.0)
    assert sum(r["typical_corrected_ns"] for r in agg["path"]) == pytest.approx(5705 - 1250)


def _cli(argv, capsys):
    import argparse

    from rpcscope.analysis import rtp_cli
    from rpcscope.output import UserError
    ap = argparse.ArgumentParser(prog="rpcscope")
    rtp_cli.register(ap.add_subparsers())
    try:
        args = ap.parse_args(argv)
        rc = args.func(args)
    except UserError as e:
        rc, err = 1, str(e)
    except SystemExit as e:
        rc, err = e.code, ""
    else:
        err = ""
    out = capsys.readouterr()
    return rc, out.out, out.err + err


def test_cli(real, tmp_path, capsys):
    _, d = real
    rc, out, _ = _cli(["rtp", "--help"], capsys)
    assert rc == 0 and "examples:" in out
    rc, out, err = _cli(["rtp", str(d), "--quiet"], capsys)
    assert rc == 0, err
    assert "udp-maxarg-0" in out and "slack" in out and "veth" in out
    rc, out, _ = _cli(["rtp", str(d), "--json", "--case", "udp-maxarg-0"], capsys)
    j = json.loads(out)
    assert j["format"] == "rpcscope-rtp/1" and [c["case"] for c in j["cases"]] == ["udp-maxarg-0"]
    rc, out, err = _cli(["rtp", str(d), "--case", "udp-maxarg-0", "--rpc", "0"], capsys)
    assert rc == 0 and "C21" in out
    rc, out, err = _cli(["rtp", str(tmp_path)], capsys)
    assert rc != 0 and "manifest" in err


def test_registered_in_the_cli():
    src = (pathlib.Path(__file__).parents[2] / "rpcscope" / "cli.py").read_text()
    assert '"rpcscope.analysis.rtp_cli"' in src

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


def test_every_path_segment_has_a_model_unit(real):
    """The model charges each segment of the measured path to a unit through the catalog: none is left
    unknown, and the class times with the network add up to the path."""
    _, d = real
    obs = observations(d, "udp")
    assert "unclassified_segments" not in obs.inputs
    for z, o in obs.sizes.items():
        assert o.path_us and sum(o.class_us.values()) + o.network_us == pytest.approx(o.path_us)
        assert o.class_us["send"] > 0 and o.class_us["wakeup"] > 0 and o.class_us["call"] > 0
