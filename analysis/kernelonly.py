"""The round-trip path of an RPC that carries no marks, from kernel events alone (steps.toml
[[target_steps]]), for a case that collectors/target.py captured.

1. Decode the two tracefs dumps (programs: system calls and scheduling of the target's threads; net:
   the two hosts' device hand-offs and receives), all on one CLOCK_MONOTONIC.
2. Name each fd's socket: an fd number holds one socket from its socket()/accept() to its close();
   the poller's /proc sighting of (pid, fd, inode, 4-tuple) at a time names the socket of that span.
3. Pair each client socket with the server's: TCP by the reversed 4-tuple; UDP by the server's
   address and port where the client's socket is connected, else the server's UDP socket that took
   the most datagrams while the client's was in use.
4. Cut the server's operations on a socket into serves (its receives since its last send, then its
   sends). Positions are bytes of each direction's stream (TCP) or datagrams (UDP): the client's sends
   whose last position the serve's receives took are the request (the first one's send begins the
   call), the serve's sends the reply, and the client's receive of its last position ends the call.
5. Walk the call's critical path backwards from each receive's return (the receiving thread's last
   waking before it and its running again after that, the device receive before the waking, the
   hand-off of the same skb), giving the boundaries T0..T11 of K1..K11, which chain, so that they
   sum to the call's RTT.
6. Count the recorded events each step holds (the probe's charge, analysis/kernelonly_probe.py): an
   event is charged to the step whose [begin, end) holds its timestamp (a tracer's cost comes after
   the timestamp it takes), if it is the program instance's on the step's thread (the client's for
   client steps, the server's for server steps, the sender's for the network ones; a switch counts for
   the thread it switches in, a waking for the thread it wakes, wherever it ran), or the net
   instance's recorded on the CPU the step ends on (its events run in whichever context is there; a
   wake-up ends on the woken thread's CPU, while the rest of the softirq that woke it runs on the
   waker's, beside it).
7. Where a --uprobe function encloses the calls (the client's call function), give each call its edges
   KC1 and KC2 from the outermost such function (analysis/uprobesteps.py): the client's user space
   before its first send and after its last receive, which the kernel cannot see.

    res = analyze_case(case_dir)         # CaseResult: calls, unmatched reasons, per-call steps
"""
import bisect
import collections
import dataclasses
import gzip
import json
import pathlib
import statistics
import types

from rpcscope.output import UserError
from rpcscope.rundir import TARGET_CASE_JSON, TARGET_EVENT_CPU, TARGET_EVENTS
from rpcscope.tracepoints.targetsteps import by_id, on_path

from . import uprobesteps

PATH_IDS = tuple(s.id for s in on_path())
# Whose thread each K step's program events are charged to: its side (network: the sender's) and the half
# of the call it is in (K1..K6 the request's, K7..K11 the reply's).
PATH_THREADS = tuple((s.side, 0 if i < 6 else 1) for i, s in enumerate(on_path()))
SEND = frozenset(e.split("sys_enter_", 1)[1] for e in by_id("K1").kernel_begin)
RECV = frozenset(e.split("sys_exit_", 1)[1] for e in by_id("K5").kernel_end)
OPENS = frozenset(("socket", "accept", "accept4"))


@dataclasses.dataclass
class Op:
    """One send or receive system call that moved data on a socket."""
    tid: int
    tgid: int
    fd: int
    kind: str            # "send" or "recv"
    enter: int
    exit: int
    n: int               # bytes (TCP) or 1 (a UDP datagram)
    pos: int = 0         # its first position in its direction's stream


@dataclasses.dataclass
class Call:
    """One matched call: its boundaries T0..T11 (ns), its steps (ns) and what the walk did not find."""
    index: int
    socket: str
    t: list
    steps: dict
    missing: list
    slept: dict          # {"server": bool, "client": bool}
    request: int         # the request's and the reply's length (bytes, or datagrams over UDP)
    reply: int
    overlap: dict        # KO1, KO2: the sends' time after their hand-off (ns), off the path
    events: dict = dataclasses.field(default_factory=dict)   # K step -> recorded events charged to it
    edges: dict = dataclasses.field(default_factory=dict)    # KC1, KC2 (ns) where a --uprobe encloses the call
    control: bool = False  # the protocol's own exchange (an HTTP/2 PING and its answer), not a program call
    gap_after: int = -1  # from its reply's receive to the next call's send (ns; -1: the last call): the
                         # client's user space after one call and before the next, which the kernel cannot split

    @property
    def rtt(self):
        return self.t[-1] - self.t[0]

    @property
    def call_rtt(self):
        """From the enclosing function's entry to its return (edges and kernel path), or None."""
        return self.rtt + sum(self.edges.values()) if self.edges else None


@dataclasses.dataclass
class CaseResult:
    case_id: str
    target: str
    transport: str
    size: int
    exchanges: int                # the client's request/reply exchanges on the sockets it used
    calls: list                   # matched Calls of the program's calls (its connection's last ones)
    matched: int                  # matched exchanges of every socket
    unmatched: dict               # reason -> count, over every exchange
    program_unmatched: dict       # reason -> count, over the program's calls
    others: dict                  # socket pair -> exchanges that are not the program's calls
    setup: int                    # exchanges before the program's calls (connection setup, warm-up)
    control: int                  # the protocol's own exchanges on the connection (e.g. HTTP/2 PINGs)
    per_call: float               # the connection's exchanges per call the program made (warm-up included)
    program_p50_us: float
    program_calls: int
    uprobes: list = dataclasses.field(default_factory=list)   # analysis/uprobesteps.py rows, one per --uprobe
    untraced_p50s_us: list = dataclasses.field(default_factory=list)   # the client's untraced runs
    call_probe: str = ""          # the --uprobe function that encloses the calls (their edges KC1, KC2), if any
    round: int = 1                # the case's round of its run (collectors/target.py, --repeats)


# ---------------------------------------------------------------- reading

def read_events(dump_dir):
    """[(ts, event, tid, fields)] of one instance's events (collectors/target.py wrote them decoded,
    rundir.TARGET_EVENTS), in time order."""
    path = pathlib.Path(dump_dir) / TARGET_EVENTS
    try:
        with gzip.open(path, "rt") as f:
            return [tuple(json.loads(line)) for line in f]
    except (OSError, ValueError, EOFError) as e:
        raise UserError(f"{path}: the case's decoded events are missing or damaged ({e}); capture it again") \
            from None


# ---------------------------------------------------------------- sockets and operations

class Sockets:
    """Which socket each (tgid, fd) held when, from the fd's openings and closings in the trace and the
    poller's /proc sightings."""

    def __init__(self, sightings):
        self.starts = collections.defaultdict(list)      # (tgid, fd) -> [start ns of each span]
        self.ends = {}                                   # (tgid, fd, start) -> end ns
        self.sightings = sightings

    def open(self, tgid, fd, ts):
        self.starts[(tgid, fd)].append(ts)

    def close(self, tgid, fd, ts):
        st = self.starts.get((tgid, fd)) or [-1]
        self.ends.setdefault((tgid, fd, st[-1]), ts)

    def span(self, tgid, fd, ts):
        """The start of the socket span of (tgid, fd) at ts: -1 for one opened before the trace (or by a
        call it does not record), None once its socket is closed (the fd then holds something else)."""
        st = self.starts.get((tgid, fd), [])
        k = bisect.bisect_right(st, ts) - 1
        start = st[k] if k >= 0 else -1
        end = self.ends.get((tgid, fd, start))
        return None if end is not None and end <= ts else start

    def identify(self):
        """{(tgid, fd, span start): sighting} for every sighting that falls in a span."""
        out = {}
        for s in self.sightings:
            start = self.span(s["pid"], s["fd"], s["seen_ns"])
            if start is not None:
                out.setdefault((s["pid"], s["fd"], start), s)
        return out


def operations(events, tgid_of, sightings):
    """({socket key: [Op]}, {socket key: sighting}): the data-moving system calls, per socket."""
    socks = Sockets(sightings)
    pending, raw_ops = {}, []
    for ts, name, tid, f in events:
        if not name.startswith("syscalls:"):
            continue
        call = name.split("_", 2)[2] if "sys_" in name else ""
        tgid = tgid_of(tid)
        if name.startswith("syscalls:sys_enter_"):
            if call == "close":
                socks.close(tgid, f.get("fd", -1), ts)
            else:
                pending[tid] = (call, ts, f.get("fd", -1))
        else:
            ret = f.get("ret", -1)
            if call in OPENS:
                if ret >= 0:
                    socks.open(tgid, ret, ts)
                continue
            p = pending.pop(tid, None)
            if p is None or p[0] != call or ret <= 0:
                continue
            kind = "send" if call in SEND else "recv" if call in RECV else None
            if kind:
                raw_ops.append(Op(tid=tid, tgid=tgid, fd=p[2], kind=kind, enter=p[1], exit=ts, n=ret))
    ident = socks.identify()
    per = collections.defaultdict(list)
    for op in raw_ops:
        key = (op.tgid, op.fd, socks.span(op.tgid, op.fd, op.enter))
        # a socket: made by socket()/accept() in the trace, or seen as one in /proc
        if key[2] is not None and (key[2] != -1 or key in ident):
            per[key].append(op)
    return per, ident


def pair_sockets(per, ident, client_tgid):
    """[(client key, server key or None, why)] for every client socket that moved data."""
    servers = {k: ident.get(k) for k in per if k[0] != client_tgid}

    def by_time(ops, among):
        """The server socket of among that received, while the client's was in use, most of the sizes the
        client sent: [key] or []."""
        lo, hi = ops[0].enter, ops[-1].exit
        sent = {o.n for o in ops if o.kind == "send"}
        score = {k: sum(1 for o in per[k] if o.kind == "recv" and lo <= o.exit <= hi and o.n in sent)
                 for k in among}
        return [k for k in sorted(score, key=lambda k: -score[k]) if score[k]][:1]

    out = []
    for key, ops in per.items():
        if key[0] != client_tgid:
            continue
        s = ident.get(key)
        cands = []
        if s is None:
            cands = by_time(ops, servers)
            out.append((key, cands[0] if cands else None,
                        "" if cands else "the client's socket was not seen in /proc and no server socket "
                                         "received while it was in use"))
            continue
        port = s["remote"].rsplit(":", 1)[1]
        same = {k: v for k, v in servers.items() if v and v["proto"] == s["proto"]}
        if port == "0":
            # Not connected when the poller saw it (a UDP socket that names its peer per send, or a TCP
            # socket seen between socket() and connect()): the server socket of its protocol that
            # received the most while it was in use.
            lo, hi = ops[0].enter, ops[-1].exit
            score = {k: sum(1 for o in per[k] if o.kind == "recv" and lo <= o.exit <= hi) for k in same}
            cands = [k for k in sorted(score, key=lambda k: -score[k]) if score[k]][:1]
        elif s["proto"] == "tcp":
            cands = [k for k, v in same.items() if v["local"] == s["remote"] and v["remote"] == s["local"]]
        else:
            cands = [k for k, v in same.items() if v["local"].rsplit(":", 1)[1] == port]
        if not cands:
            # The server's socket went unseen (accepted and closed between two polls): by time, among those.
            cands = by_time(ops, [k for k, v in servers.items() if v is None])
        if not cands:
            out.append((key, None, f"no server socket pairs with the client's {s['proto']} {s['local']} -> "
                                   f"{s['remote']}"))
        else:
            out.append((key, cands[0], ""))
    return out


def _positions(ops, udp):
    """Number each op's first position in its direction's stream; the ops' end positions."""
    pos, ends = 0, []
    for op in ops:
        if udp:
            op.n = 1
        op.pos = pos
        pos += op.n
        ends.append(pos)
    return ends


def _containing(ops, ends, x):
    k = bisect.bisect_right(ends, x)
    return ops[k] if k < len(ops) else None


# ---------------------------------------------------------------- the critical path

class Timeline:
    """The scheduling and device events, indexed for 'the latest X in [lo, hi]'."""

    def __init__(self, prog_events, net_events, devices):
        self.switch_in = collections.defaultdict(list)
        self.waking = collections.defaultdict(list)
        self.running = collections.defaultdict(list)     # tid -> times of events the thread itself made
        self.recorded = collections.defaultdict(list)    # tid -> times of the program events charged to it
        for ts, name, tid, f in prog_events:
            if name == "sched:sched_switch":
                self.switch_in[f["next_pid"]].append(ts)
                self.recorded[f["next_pid"]].append(ts)
            elif name == "sched:sched_waking":
                self.waking[f["pid"]].append(ts)
                self.recorded[f["pid"]].append(ts)
            else:
                self.recorded[tid].append(ts)
            if name.startswith("syscalls:"):
                self.running[tid].append(ts)
        self.net_all = sorted(ts for ts, *_ in net_events)
        # The CPU each event was recorded on (a dump decoded without it has none: then a step is charged
        # the net events of every CPU), by timestamp; a time two CPUs share names none.
        self.cpu_at = {}
        self.net_on = collections.defaultdict(list)      # cpu -> times of the net events recorded there
        for ts, _name, _tid, f in (*prog_events, *net_events):
            c = f.get(TARGET_EVENT_CPU)
            if c is not None:
                self.cpu_at[ts] = c if self.cpu_at.get(ts, c) == c else None
        self.xmit = {r: ([], []) for r in devices}
        self.recv = {r: ([], []) for r in devices}
        role_of = {d: r for r, d in devices.items()}
        for ts, name, _tid, f in net_events:
            if f.get(TARGET_EVENT_CPU) is not None:
                self.net_on[f[TARGET_EVENT_CPU]].append(ts)
            if name == "sched:sched_switch":           # out of the idle task (collectors/target.py)
                self.switch_in[f["next_pid"]].append(ts)
                continue
            role = role_of.get(f.get("name"))
            if role is None:
                continue
            book = self.xmit if name == "net:net_dev_xmit" else self.recv if name == "net:netif_receive_skb" else None
            if book is not None:
                book[role][0].append(ts)
                book[role][1].append(f.get("skbaddr"))
        for times in (*self.switch_in.values(), *self.net_on.values()):
            times.sort()

    def charged(self, t, tids):
        """Recorded events per step of boundaries t (the K steps' [t[k], t[k+1])): the program events of
        its thread in tids (one per step; a waking that begins a wake-up counts, wherever it ran), and the
        net events recorded on the CPU of the event that ends it (a wake-up ends on the woken thread's
        CPU: the rest of the softirq that woke it runs beside it, on the waker's)."""
        out = {}
        for k, sid in enumerate(PATH_IDS):
            lo, hi = t[k], t[k + 1]
            mine = self.recorded.get(tids[k], ())
            cpu = self.cpu_at.get(hi)
            net = self.net_all if cpu is None else self.net_on.get(cpu, ())
            out[sid] = (bisect.bisect_left(mine, hi) - bisect.bisect_left(mine, lo)
                        + bisect.bisect_left(net, hi) - bisect.bisect_left(net, lo))
        return out

    @staticmethod
    def first(times, lo, hi):
        """The earliest time in [lo, hi], else hi."""
        k = bisect.bisect_left(times, lo)
        return times[k] if k < len(times) and times[k] <= hi else hi

    @staticmethod
    def last(times, lo, hi):
        k = bisect.bisect_right(times, hi) - 1
        return times[k] if k >= 0 and times[k] >= lo else None

    def last_dev(self, book, role, lo, hi, skb=None):
        """(ts, skbaddr) of the latest event in [lo, hi]; with skb, the latest of that skb if any."""
        times, skbs = book[role]
        k = bisect.bisect_right(times, hi) - 1
        first = None
        while k >= 0 and times[k] >= lo:
            if skb is None or skbs[k] == skb:
                return times[k], skbs[k]
            first = first or (times[k], skbs[k])
            k -= 1
        return first if skb is not None else None

    def half(self, start, end, end_tid, sender, receiver, missing, side):
        """Boundaries [send, hand-off, device receive, waking, switch-in, receive return] of one direction,
        from the sender's send enter (start) to the receiver's receive return (end), walked backwards."""
        t_wake = self.last(self.waking.get(end_tid, []), start, end)
        slept = t_wake is not None
        if slept:
            # runs again: its switch in, or (where the trace lacks it) its first own event after the waking
            t_in = min(self.first(self.switch_in.get(end_tid, []), t_wake, end),
                       self.first(self.running.get(end_tid, []), t_wake, end), end)
        else:
            t_in = t_wake = end                          # the thread did not sleep: K3 runs to the return
        rx = self.last_dev(self.recv, receiver, start, t_wake)
        if rx is None:
            missing.append(f"{side} netif_receive_skb")
            rx = (t_wake, None)
        tx = self.last_dev(self.xmit, sender, start, rx[0], skb=rx[1])
        if tx is None:
            missing.append(f"{side} net_dev_xmit")
            tx = (rx[0], None)
        return [start, tx[0], rx[0], t_wake, t_in, end], slept


# ---------------------------------------------------------------- calls

def _exchanges(ops):
    """The client's ops on one socket cut into (sends, recvs) exchanges."""
    out, sends, recvs = [], [], []
    for op in sorted(ops, key=lambda o: o.enter):
        if op.kind == "send":
            if recvs:
                out.append((sends, recvs))
                sends, recvs = [], []
            sends.append(op)
        elif sends:
            recvs.append(op)
    if sends:
        out.append((sends, recvs))
    return out


def _serves(server_ops):
    """The server's ops on one socket cut into (recvs, sends) serves: the receives since its last send,
    then its sends up to its next receive."""
    out, recvs, sends = [], [], []
    for op in sorted(server_ops, key=lambda o: o.enter):
        if op.kind == "recv":
            if sends:
                out.append((recvs, sends))
                recvs, sends = [], []
            recvs.append(op)
        else:
            sends.append(op)
    if recvs or sends:
        out.append((recvs, sends))
    return out


def _requests(server_ops, cs, cs_ends, unmatched):
    """The exchanges of a socket pair: [(index, server's receives, server's sends, the request's client
    sends)] of every serve that answers something, in order; unmatched gets the reason for the others."""
    out, k = [], -1
    for rin, sout in _serves(server_ops):
        if not rin:
            continue                              # the server's own, answering nothing
        k += 1
        if not sout:
            unmatched[k] = "no reply sent (the trace ends first)"
            continue
        r0, r1 = rin[0].pos, rin[-1].pos + rin[-1].n
        lo, hi = bisect.bisect_right(cs_ends, r0), bisect.bisect_right(cs_ends, r1 - 1)
        sends = cs[lo:hi + 1] if hi < len(cs) else cs[lo:]
        sends = [o for o in sends if r0 <= o.pos + o.n - 1 < r1]
        if not sends:
            unmatched[k] = "the server took bytes no client send accounts for"
            continue
        out.append((k, rin, sout, sends))
    return out, k + 1


def _is_control(req, rep, med_req, med_rep):
    """The protocol's own exchange (an HTTP/2 PING and its answer): request and reply both under half the
    connection's median ones."""
    return 2 * req < med_req and 2 * rep < med_rep


def match_pair(client_ops, server_ops, udp, timeline, label, unmatched):
    """The matched Calls of one socket pair, in order, and the number of exchanges; the reason each
    unmatched exchange is not a call goes into unmatched (exchange index -> reason).

    An exchange is one of the server's serves that answers something: the client's sends whose last
    position the server took in the serve's receives are the request (the first one's send begins the
    call), the serve's sends are the reply, and the client's receive that takes its last position ends
    the call. Sends of the server's own that answer nothing (an HTTP/2 PING) are no exchange; an
    exchange of the protocol's own (Call.control) is matched like the others.

    The client has one call outstanding on a connection, so a call ends before the next one's request
    is sent and begins after the one before it ended. Where the reply's last position is read only after
    the next call's request proper (its largest send), the server sent more behind the reply (a PING) and
    the call ends at the client's last receive before that send; sends of the request made before the
    call before it ended (a PING's answer) are not the request's."""
    cs = sorted([o for o in client_ops if o.kind == "send"], key=lambda o: o.enter)
    cr = sorted([o for o in client_ops if o.kind == "recv"], key=lambda o: o.enter)
    ss = sorted([o for o in server_ops if o.kind == "send"], key=lambda o: o.enter)
    sr = sorted([o for o in server_ops if o.kind == "recv"], key=lambda o: o.enter)
    cs_ends, cr_ends = _positions(cs, udp), _positions(cr, udp)
    _positions(sr, udp), _positions(ss, udp)
    exchanges, n = _requests(server_ops, cs, cs_ends, unmatched)
    sizes = [(sum(o.n for o in sends), sum(o.n for o in sout)) for _, _, sout, sends in exchanges]
    med_req = statistics.median(q for q, _ in sizes) if sizes else 0
    med_rep = statistics.median(r for _, r in sizes) if sizes else 0
    control = [_is_control(q, r, med_req, med_rep) for q, r in sizes]
    calls, prev_end = [], None
    for i, (k, rin, sout, sends) in enumerate(exchanges):
        got, first, last = rin[-1], sout[0], sout[-1]
        c, d = first.pos, last.pos + last.n
        end = _containing(cr, cr_ends, d - 1)
        if end is None:
            unmatched[k] = "no reply received (the trace ends first)"
            continue
        if not control[i]:
            if prev_end is not None:
                sends = [o for o in sends if o.enter >= prev_end] or sends
            nxt = next((exchanges[j][3] for j in range(i + 1, len(exchanges)) if not control[j]), None)
            # the next call's request proper: its largest send (a PING's answer may go before or after it)
            main = max(nxt, key=lambda o: o.n) if nxt else None
            if main and end.exit > main.enter:
                before = [o for o in cr if o.exit <= main.enter and o.pos + o.n > c]
                if not before:
                    unmatched[k] = "the reply was read only after the next call's request"
                    continue
                end = before[-1]
                d = end.pos + end.n
                last = max((o for o in sout if o.pos < d), key=lambda o: o.pos)
        if got.exit < sends[0].enter or end.exit < last.enter:
            unmatched[k] = "send and receive out of order (the records are not one call)"
            continue
        if not control[i]:
            prev_end = end.exit
        recvs = [end]
        a, b = sends[0].pos, sends[-1].pos + sends[-1].n
        missing, dev = [], ("client", "server")
        t_req, srv_slept = timeline.half(sends[0].enter, got.exit, got.tid, dev[0], dev[1], missing, "server")
        t_rep, cli_slept = timeline.half(first.enter, recvs[-1].exit, recvs[-1].tid, dev[1], dev[0], missing,
                                         "client")
        reply_sends = [o for o in ss if first.pos <= o.pos <= last.pos and o.enter <= t_rep[1]]
        t_rep[0] = max(o.enter for o in reply_sends) if reply_sends else first.enter
        t = t_req + t_rep
        steps = {sid: t[i + 1] - t[i] for i, sid in enumerate(PATH_IDS)}
        cli_send = max((o for o in sends if o.enter <= t[1]), key=lambda o: o.enter, default=sends[0])
        srv_send = max((o for o in reply_sends), key=lambda o: o.enter, default=first)
        overlap = {"KO1": max(0, cli_send.exit - t[1]), "KO2": max(0, srv_send.exit - t[7])}
        # each step's thread: the client's sender or receiver, the server's receiver or sender
        thread = {("client", 0): cli_send.tid, ("client", 1): end.tid, ("server", 0): got.tid,
                  ("server", 1): srv_send.tid, ("network", 0): cli_send.tid, ("network", 1): srv_send.tid}
        tids = [thread[key] for key in PATH_THREADS]
        calls.append(Call(index=k, socket=label, t=t, steps=steps, missing=missing,
                          slept={"server": srv_slept, "client": cli_slept}, request=b - a, reply=d - c,
                          overlap=overlap, events=timeline.charged(t, tids), control=control[i]))
    for a, b in zip(calls, calls[1:]):
        if b.index == a.index + 1:
            a.gap_after = b.t[0] - a.t[-1]
    return calls, n


def analyze_case(case_dir):
    """The CaseResult of one captured target case."""
    case_dir = pathlib.Path(case_dir)
    try:
        tc = types.SimpleNamespace(**json.loads((case_dir / TARGET_CASE_JSON).read_text()))
    except (OSError, ValueError) as e:
        raise UserError(f"{case_dir}: no target case record ({e}); capture it again with rpcscope run --target") \
            from None
    try:
        sock = json.loads((case_dir / "sockets.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{case_dir}/sockets.json: {e}; capture the case again") from None
    prog = read_events(case_dir / "programs")
    net = read_events(case_dir / "net")
    tgids = {int(k): v for k, v in json.loads((case_dir / "programs" / "tgids.json").read_text()).items()}
    tgids.update({int(k): v for k, v in sock["tids"].items()})
    per, ident = operations(prog, lambda tid: tgids.get(tid, tid), sock["sockets"])
    timeline = Timeline(prog, net, sock["devices"])
    unmatched = collections.Counter()
    results = []
    for ckey, skey, why in pair_sockets(per, ident, tc.client_pid):
        s, srv = ident.get(ckey), ident.get(skey)
        if skey is None:
            results.append((f"fd {ckey[1]} (unpaired)", [], len(_exchanges(per[ckey])), {}, why))
            continue
        far = srv["local"] if srv else f"fd {skey[1]} of pid {skey[0]}"
        label = (f"{s['proto']} {s['local']} -> {far}" if s else
                 f"{srv['proto'] if srv else 'socket'} fd {ckey[1]} (not seen in /proc; paired by time) -> {far}")
        udp = (s or srv or {}).get("proto") == "udp"
        why_not = {}
        calls, n = match_pair(per[ckey], per[skey], udp, timeline, label, why_not)
        results.append((label, calls, n, why_not, ""))
    for _label, _calls, n, why_not, why in results:
        unmatched.update(why_not.values())
        if why:
            unmatched[why] += n
    if not any(r[1] for r in results):
        raise UserError(f"{case_dir}: no client socket pairs with a server socket; nothing to match")
    results.sort(key=lambda r: -r[2])
    label, calls, n_main, why_not, _ = results[0]
    # The program's measured calls are the connection's last exchanges but the protocol's own (match_pair:
    # Call.control); those before them are set-up and warm-up.
    control = {c.index for c in calls if c.control}
    idx = sorted([c.index for c in calls if c.index not in control] + list(why_not))
    mine = set(idx[len(idx) - tc.program_calls:]) if tc.program_calls else set()
    measured = [c for c in calls if c.index in mine]
    try:
        probes = json.loads((case_dir / "uprobes.json").read_text())
    except (OSError, ValueError):
        probes = []
    got = uprobesteps.intervals(prog, probes) if probes else {}      # read once, for the probes' rows and edges
    return CaseResult(case_id=case_dir.name, target=tc.target, transport=tc.transport, size=tc.size,
                      exchanges=sum(r[2] for r in results), calls=measured,
                      uprobes=uprobesteps.summarize(got, probes, measured, tc.program_p50_us),
                      matched=sum(len(r[1]) for r in results), unmatched=dict(unmatched),
                      program_unmatched=dict(collections.Counter(w for k, w in why_not.items() if k in mine)),
                      others={r[0]: r[2] for r in results[1:]}, setup=len(idx) - len(mine), control=len(control),
                      per_call=round((n_main - len(control)) / max(1, tc.program_calls + tc.warmup), 2),
                      program_p50_us=tc.program_p50_us, program_calls=tc.program_calls,
                      untraced_p50s_us=list(getattr(tc, "untraced_p50s_us", None) or []),
                      call_probe=uprobesteps.attach_edges(got, probes, measured) or "",
                      round=int(getattr(tc, "round", 1)))
