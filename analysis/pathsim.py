"""One call's round-trip path, computed from unit costs and the protocol's arithmetic.

The model (analysis/model.py) has a few physical unit costs (UNITS). This module lays one
call out in time with them, the way the reference RPC runs it on two CPUs:

UDP (rpc/client.c, rpc/server.c): the client does its per-call work, then sends the
request window by window. Each fragment's send costs `send` + `copy_in` x its bytes +
`packet` x its IP packets + `carry` x its bytes (on veth the receiver's protocol input runs
inside the sender's send). The server, blocked in select, is woken by a window's first fragment (`wakeup`)
and receives each fragment (`receive` + `copy_out` x bytes); a fragment that arrives while
the server is still busy with the previous one needs no wake-up, one that arrives after
the server went back to wait does. A window but the last ends with an acknowledgement
(`ack`, then a one-packet send back, a client wake-up and receive). Then the server
sends the reply's fragments and the client, woken by the first, receives each.

TCP: one record each way, sent in one send (the kernel hands veth one GSO packet per
64 KiB) and received in one receive after one wake-up. The receiver's ACKs go out
beside the path (on veth they ride in the softirq after the waking, or on the reply).

The time a call takes is the end of that schedule: two stages (sender, receiver) working
on one window's fragments overlap, so which sends and receives are on the path follows
from the costs and the arithmetic, not from a rule per size. Along the way the path
keeps how many of each unit it passed through (`Chain.n`) and the bytes each class
copied (`Chain.b`; per call, `marshal` x both bodies twice): the counts the fit (analysis/model.py) regresses the
measured
path's class totals on.

The wire (analysis/network.py) adds each frame's serialisation on a serial link; a
token bucket is applied to the whole call afterwards (network.paced_rtt_us).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rpcscope import packets as P

from . import network as N

# The unit costs: (name, unit, what one count is). The first six are classes of path segments (the
# catalog's `unit` field); the last four are each a cost per byte of one of those classes.
UNITS = (
    ("call", "us/call", "once per call: stubs, marshalling set-up, dispatch, the time between marks"),
    ("send", "us/send", "a send syscall up to the device hand-off, per PDU or record sent on the path"),
    ("packet", "us/packet", "a packet through the device and the receiver's protocol input"),
    ("receive", "us/receive", "select's return and a receive syscall, per PDU or record received on the path"),
    ("wakeup", "us/wake-up", "a blocked thread woken: from the waking to running again"),
    ("ack", "us/ack", "a window acknowledgement built by the server and taken by the client"),
    ("marshal", "us/byte", "a byte of either body marshalled or unmarshalled, on either side (per call)"),
    ("copy_in", "us/byte", "a byte copied into the kernel by a send on the path"),
    ("copy_out", "us/byte", "a byte copied out of the kernel by a receive on the path"),
    ("carry", "us/byte", "a byte carried by the packets of a send on the path through the device and the receiver's "
                         "protocol input"),
)
UNIT_NAMES = tuple(u[0] for u in UNITS)
BYTE_UNITS = {"call": "marshal", "send": "copy_in", "packet": "carry", "receive": "copy_out"}  # class -> its per byte
CLASSES = tuple(n for n in UNIT_NAMES if n not in BYTE_UNITS.values())
GSO_MAX = 65536          # the largest packet a TCP send hands the device (GSO)


@dataclass(frozen=True)
class Workload:
    """What a call sends: transport, procedure, MTU and maximum PDU."""
    transport: str
    proc: str = "maxarg"
    mtu: int = P.DEFAULT_MTU
    max_pdu: int = P.DEFAULT_MAX_PDU

    def bodies(self, size):
        """(request body, reply body) in bytes at a workload size."""
        q, r = P.request_body_bytes(self.proc, size), P.reply_body_bytes(self.proc, size)
        if q is None or r is None:
            raise ValueError(f"procedure {self.proc!r}: its message sizes are unknown to analysis/packets.py")
        return q, r


@dataclass
class Chain:
    """A point in time with the path that led to it: counts per unit and bytes per class."""
    t: float = 0.0
    n: Counter = field(default_factory=Counter)
    b: Counter = field(default_factory=Counter)

    def then(self, us, unit=None, count=1, cls=None, nbytes=0):
        c = Chain(self.t + us, Counter(self.n), Counter(self.b))
        if unit:
            c.n[unit] += count
        if nbytes:
            c.b[cls or unit] += nbytes
        return c

    def step(self, theta, unit, count=1, cls=None, nbytes=0):
        """This chain after `count` of a unit (and nbytes copied, charged to class cls or the unit at
        that class's cost per byte)."""
        per_byte = theta.get(BYTE_UNITS.get(cls or unit, ""), 0.0)
        return self.then(theta.get(unit, 0.0) * count + per_byte * nbytes, unit, count, cls, nbytes)


def latest(a, b):
    return a if a.t >= b.t else b


@dataclass(frozen=True)
class CallPath:
    """One call laid out: its CPU round trip, the wire's share, and the counts on its path."""
    size: int
    cpu_us: float           # the round trip without the token bucket's pacing
    rtt_us: float           # with the link's pacing where it paces
    paced_by: str
    counts: dict            # unit -> occurrences on the path
    bytes_by_class: dict    # class -> bytes copied on the path
    wire: N.WireTime


def _send(ch, theta, nbytes, packets):
    return ch.step(theta, "send", nbytes=nbytes).step(theta, "packet", count=packets, nbytes=nbytes)


def _deliver(sent_end, frames, link, wire_free):
    """When a sent PDU's frames reach the receiver, and when the wire is free again (serial links)."""
    if link.kind != "serial":
        return sent_end.then(link.latency_us), wire_free
    start = max(sent_end.t, wire_free)
    done = start + sum(N.frame_us(n, link.rate_bps) for n in frames)
    return Chain(done + link.latency_us, Counter(sent_end.n), Counter(sent_end.b)), done


def _pipeline(start_send, receiver_free, items, theta, link):
    """A sender sending items [(bytes, ip packets, frames)] back to back to a receiver that is blocked
    until the first arrives: returns (sender's chain after its last send, receiver's chain after its
    last receive)."""
    s, r, wire_free = start_send, receiver_free, 0.0
    for nbytes, packets, frames in items:
        s = _send(s, theta, nbytes, packets)
        arrive, wire_free = _deliver(s, frames, link, wire_free)
        if arrive.t > r.t:           # the receiver is waiting: woken by this arrival
            r = arrive.step(theta, "wakeup")
        r = r.step(theta, "receive", nbytes=nbytes)
    return s, r


def _udp(wl, size, theta, link):
    qb, rb = wl.bodies(size)
    q, r = P.Message(qb, wl.max_pdu, wl.mtu), P.Message(rb, wl.max_pdu, wl.mtu)
    client = Chain().step(theta, "call", cls="call", nbytes=2 * (qb + rb))
    server = Chain(float("-inf"))
    i = 0
    for w, k in enumerate(q.windows):
        items = [(f, len(P.ip_body_bytes(f, wl.mtu)), N.udp_ip_lengths(P.HDR_LEN + f, wl.mtu))
                 for f in q.frags[i:i + k]]
        i += k
        client, server = _pipeline(client, server, items, theta, link)
        if w < len(q.windows) - 1:   # acknowledge the window; the client waits for it
            ack = [(0, 1, N.udp_ip_lengths(P.HDR_LEN, wl.mtu))]
            server = server.step(theta, "ack")
            server_after, client = _pipeline(server, client, ack, theta, link)
            server = server_after
    items = [(f, len(P.ip_body_bytes(f, wl.mtu)), N.udp_ip_lengths(P.HDR_LEN + f, wl.mtu)) for f in r.frags]
    _, client = _pipeline(server, client, items, theta, link)
    return client


def _tcp(wl, size, theta, link):
    qb, rb = wl.bodies(size)
    client = Chain().step(theta, "call", cls="call", nbytes=2 * (qb + rb))
    server = Chain(float("-inf"))

    def record(body):
        frames = N.tcp_ip_lengths(body, wl.mtu)
        skbs = -(-(P.TCP_MARK + P.HDR_LEN + body) // GSO_MAX)
        return [(body, skbs, frames)]

    client, server = _pipeline(client, server, record(qb), theta, link)
    _, client = _pipeline(server, client, record(rb), theta, link)
    return client


def call_path(wl, size, theta, link=None):
    """The CallPath of one call of workload wl at a size, with unit costs theta {unit: us}."""
    link = link or N.Link(mtu=wl.mtu)
    if link.mtu != wl.mtu:
        wl = Workload(wl.transport, wl.proc, link.mtu, wl.max_pdu)
    end = (_tcp if wl.transport == "tcp" else _udp)(wl, size, theta, link)
    qb, rb = wl.bodies(size)
    wt = N.wire_time(N.exchange(wl.transport, qb, rb, wl.mtu, wl.max_pdu), link)
    cpu = end.t
    rtt, why = N.paced_rtt_us(cpu, wt, link) if link.kind == "tbf" else (cpu, "cpu and wire")
    return CallPath(size, cpu, rtt, why, dict(end.n), dict(end.b), wt)
