"""Time on the wire, from physics: the bits of every frame over the link rate.

The model (analysis/model.py) fits no network term. It takes the frames the protocol
sends for a call from the packet arithmetic (analysis/packets.py), in the order the
protocol sends them, and charges each frame its bits on the wire over the link rate:

    frame bytes on the wire = preamble+SFD 8 + MAC header 14 + max(IP packet, 46) + FCS 4
                              + inter-frame gap 12
    IP packet               = IP header 20 + UDP header 8 + RPC header 80 + body (the first
                              IP fragment of a datagram; later ones carry 20 + data), or
                              IP 20 + TCP 20 + timestamps 12 + segment (TCP)

A link is one of three kinds:

    none    no serialisation (the unshaped veth testbed, loopback): only the fixed latency
    serial  a serial line (the papers' Ethernet): every frame on the round-trip path costs
            its bits over the rate, one after another; a window's fragments leave back to
            back, the reply after the request
    tbf     the token bucket the local testbed installs to shape a link (tc tbf on each
            host's interface, burst = max(MTU + 18, rate / 8000) bytes): a frame passes at
            once while the bucket holds tokens, and back-to-back calls that send more
            bytes than the rate refills in their CPU time run at the bucket's pace, the
            bytes per call (MAC header included, no preamble, FCS or gap) over the rate

Nothing here needs numpy.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rpcscope import packets as P
from rpcscope.units import fmt_rate

ETH_PREAMBLE = 8        # preamble and start-of-frame delimiter
ETH_HDR = 14            # destination, source, EtherType
ETH_FCS = 4
ETH_IFG = 12            # inter-frame gap, in byte times
ETH_MIN_PAYLOAD = 46
TCP_HDR = P.TCP_HDR + P.TCP_TIMESTAMPS
LINK_KINDS = ("none", "serial", "tbf")


class LinkError(ValueError):
    """A link description that makes no sense (no rate for a kind that needs one, a bad MTU or kind)."""


@dataclass(frozen=True)
class Link:
    """What the wire adds: kind (LINK_KINDS), rate in bits/s (None for kind none), MTU, the fixed
    one-way latency in µs, and for tbf the bucket in bytes (the testbed's rule when None)."""
    kind: str = "none"
    rate_bps: float | None = None
    mtu: int = P.DEFAULT_MTU
    latency_us: float = 0.0
    burst_bytes: int | None = None

    def __post_init__(self):
        if self.kind not in LINK_KINDS:
            raise LinkError(f"link kind {self.kind!r}: one of {', '.join(LINK_KINDS)}")
        if self.kind != "none" and not self.rate_bps:
            raise LinkError(f"a {self.kind} link needs a rate")
        if not 576 <= int(self.mtu) <= 65535:
            raise LinkError(f"MTU {self.mtu} is out of range (576 to 65535)")

    @property
    def burst(self):
        """The token bucket's size in bytes: the testbed's rule (rpcscope testbed up --link-rate)."""
        if self.burst_bytes:
            return self.burst_bytes
        return max(int(self.mtu) + 18, int(self.rate_bps or 0) // 8 // 1000)

    def describe(self):
        if self.kind == "none":
            return f"no serialisation (veth or loopback), MTU {self.mtu}"
        what = "serial line" if self.kind == "serial" else f"token bucket ({self.burst} B burst)"
        return f"{fmt_rate(self.rate_bps)} {what}, MTU {self.mtu}"

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, d):
        return cls(d.get("kind", "none"), d.get("rate_bps"), int(d.get("mtu", P.DEFAULT_MTU)),
                   float(d.get("latency_us", 0.0)), d.get("burst_bytes"))

    @classmethod
    def of_testbed(cls, rate_bps, mtu, latency_us=0.0):
        """The local testbed's link: a token bucket where it was shaped, else none."""
        return cls("tbf" if rate_bps else "none", rate_bps or None, int(mtu or P.DEFAULT_MTU), latency_us)


def wire_bytes(ip_len):
    """Byte times one IP packet of ip_len bytes occupies on an Ethernet wire."""
    return ETH_PREAMBLE + ETH_HDR + max(ip_len, ETH_MIN_PAYLOAD) + ETH_FCS + ETH_IFG


def mac_bytes(ip_len):
    """The frame as a qdisc counts it (tc tbf: the skb with its MAC header)."""
    return ETH_HDR + ip_len


def udp_ip_lengths(payload, mtu):
    """IP packet lengths of one UDP datagram of `payload` bytes (IP fragments carry multiples of 8)."""
    n = P.ip_packets(payload, mtu)
    if n == 1:
        return [P.IP_HDR + P.UDP_HDR + payload]
    per = (mtu - P.IP_HDR) & ~7
    left = P.UDP_HDR + payload
    out = []
    for _ in range(n):
        take = min(per, left)
        out.append(P.IP_HDR + take)
        left -= take
    return out


def tcp_ip_lengths(body_len, mtu):
    """IP packet lengths of one message's record over TCP (record mark, RPC header, body) cut at the MSS."""
    record = P.TCP_MARK + P.HDR_LEN + body_len
    mss = P.tcp_mss(mtu)
    out = []
    while True:
        take = min(mss, record)
        out.append(P.IP_HDR + TCP_HDR + take)
        record -= take
        if record <= 0:
            return out


@dataclass(frozen=True)
class Burst:
    """Frames one side sends back to back (a window, an ack, a reply), IP packet lengths in order."""
    sender: str          # "client" or "server"
    what: str            # "request window 1", "ack 1", "reply", ...
    ip_lengths: tuple


def exchange(transport, request_body, reply_body, mtu=P.DEFAULT_MTU, max_pdu=P.DEFAULT_MAX_PDU):
    """The bursts of frames of one call in the order the protocol sends them. UDP: each request
    window, each window but the last answered by an ack, then the reply's fragments. TCP: the
    request record, the reply record (the kernel's ACKs ride on data or go beside the path)."""
    if transport == "tcp":
        return [Burst("client", "request", tuple(tcp_ip_lengths(request_body, mtu))),
                Burst("server", "reply", tuple(tcp_ip_lengths(reply_body, mtu)))]
    q, r = P.Message(request_body, max_pdu, mtu), P.Message(reply_body, max_pdu, mtu)
    out, i = [], 0
    for w, k in enumerate(q.windows):
        frames = [n for f in q.frags[i:i + k] for n in udp_ip_lengths(P.HDR_LEN + f, mtu)]
        out.append(Burst("client", f"request window {w + 1}", tuple(frames)))
        i += k
        if w < len(q.windows) - 1:
            out.append(Burst("server", f"ack {w + 1}", tuple(udp_ip_lengths(P.HDR_LEN, mtu))))
    out.append(Burst("server", "reply", tuple(n for f in r.frags for n in udp_ip_lengths(P.HDR_LEN + f, mtu))))
    return out


def frame_us(ip_len, rate_bps):
    """Serialisation time of one frame in µs."""
    return wire_bytes(ip_len) * 8e6 / rate_bps


@dataclass(frozen=True)
class WireTime:
    """The network's share of one call's round trip, µs: serialisation on the path, the fixed
    latency of each crossing, and for a token bucket the pace it sets (0 when the CPU is slower)."""
    serialisation_us: float
    latency_us: float
    crossings: int
    frames: int
    bucket_bytes: dict          # {"client": bytes, "server": bytes} a call puts through each bucket
    largest_burst: dict         # {"client": bytes, "server": bytes} of its largest burst

    @property
    def total_us(self):
        return self.serialisation_us + self.latency_us


def wire_time(bursts, link):
    """The network's time on the round-trip path of one call (WireTime). Each burst crosses the link
    once; on a serial line every frame of every burst is on the path, back to back."""
    frames = sum(len(b.ip_lengths) for b in bursts)
    ser = 0.0
    if link.kind == "serial":
        ser = sum(frame_us(n, link.rate_bps) for b in bursts for n in b.ip_lengths)
    bucket, largest = {"client": 0, "server": 0}, {"client": 0, "server": 0}
    for b in bursts:
        nbytes = sum(mac_bytes(n) for n in b.ip_lengths)
        bucket[b.sender] += nbytes
        largest[b.sender] = max(largest[b.sender], nbytes)
    return WireTime(ser, link.latency_us * len(bursts), len(bursts), frames, bucket, largest)


def paced_rtt_us(cpu_rtt_us, wt, link):
    """The round trip of back-to-back calls through a token bucket. cpu_rtt_us is the call's round
    trip without the bucket (latency included). A burst larger than the bucket waits for the tokens
    it lacks; back-to-back calls that put more bytes through a bucket than the rate refills in their
    round trip run at the bucket's pace, its bytes per call over the rate. Returns (rtt, what set it)."""
    if link.kind != "tbf":
        return cpu_rtt_us, "cpu and wire"
    base = cpu_rtt_us + max(0, max(wt.largest_burst.values()) - link.burst) * 8e6 / link.rate_bps
    pace = max(wt.bucket_bytes.values()) * 8e6 / link.rate_bps
    return (pace, "token bucket") if pace > base else (base, "cpu")
