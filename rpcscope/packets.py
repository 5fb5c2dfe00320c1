"""The reference RPC's packet arithmetic in Python, mirroring rpc/wire.c exactly.

The constants are read from rpc/wire.h at import (the #defines), so the two cannot
drift; tests/python/test_packets.py compiles rpc/wire.c and compares every function
with this module over many sizes and every boundary.

    frag_body(max_pdu)                      body bytes per fragment (4016)
    frag_count(total, max_pdu)              fragments of a body (>= 1)
    frag_len(frag, total, max_pdu)          body bytes of one fragment
    ip_packets(payload, mtu)                IP packets of one UDP datagram of `payload` bytes
    request_packets(total, max_pdu, mtu)    IP packets of a whole body over UDP
    window_frags(window_bytes, max_pdu)     fragments in a window (>= 1)
    window_count(total, max_pdu)            windows a body is sent in (each but the last asks for an ack)
    windows(total, max_pdu)                 fragments per window, as a list
    ip_body_bytes(frag_body_len, mtu)       RPC body bytes carried by each IP packet of one fragment
    tcp_mss(mtu)                            TCP payload bytes per segment (1448 at MTU 1500)
    tcp_segments(body, mtu)                 TCP segments of one message's record (mark, header, body)
    Message(total, max_pdu, mtu)            all of the above for one message, as lists and counts
    request_body_bytes(proc, size)          the marshalled request body of a procedure at a workload size
    reply_body_bytes(proc, size)            the marshalled reply body of a procedure at a workload size

Sizes and counts are plain ints; nothing here needs numpy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Defaults, used only when rpc/wire.h is not there (an installed, non-editable package).
_DEFAULTS = {
    "WIRE_HDR_LEN": 80, "WIRE_DEFAULT_MAX_PDU": 4096, "WIRE_MIN_MAX_PDU": 256, "WIRE_MAX_MAX_PDU": 65000,
    "WIRE_WINDOW_INITIAL": 4096, "WIRE_WINDOW_MAX": 32768, "WIRE_IP_HDR": 20, "WIRE_UDP_HDR": 8,
    "WIRE_TCP_MARK": 4,
}
WIRE_H = Path(__file__).resolve().parent.parent / "rpc" / "wire.h"
DEFAULT_MTU = 1500


def parse_header(path=WIRE_H):
    """The integer #defines of rpc/wire.h, {name: value}."""
    out = {}
    for m in re.finditer(r"^#define\s+(WIRE_\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\b", Path(path).read_text(), re.M):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def _load():
    try:
        c = parse_header()
    except OSError:
        return dict(_DEFAULTS), False
    missing = set(_DEFAULTS) - set(c)
    if missing:
        raise ImportError(f"{WIRE_H} lacks #defines {sorted(missing)} that rpcscope.packets needs")
    return c, True


CONSTANTS, FROM_HEADER = _load()
HDR_LEN = CONSTANTS["WIRE_HDR_LEN"]
DEFAULT_MAX_PDU = CONSTANTS["WIRE_DEFAULT_MAX_PDU"]
WINDOW_INITIAL = CONSTANTS["WIRE_WINDOW_INITIAL"]
WINDOW_MAX = CONSTANTS["WIRE_WINDOW_MAX"]
IP_HDR = CONSTANTS["WIRE_IP_HDR"]
UDP_HDR = CONSTANTS["WIRE_UDP_HDR"]
TCP_MARK = CONSTANTS["WIRE_TCP_MARK"]

_U32 = 0xFFFFFFFF


def frag_body(max_pdu=DEFAULT_MAX_PDU):
    return max_pdu - HDR_LEN


def frag_count(total, max_pdu=DEFAULT_MAX_PDU):
    body = frag_body(max_pdu)
    return 1 if total == 0 else (total + body - 1) // body


def frag_len(frag, total, max_pdu=DEFAULT_MAX_PDU):
    body = frag_body(max_pdu)
    off = frag * body
    if off >= total:
        return 0
    return min(total - off, body)


def ip_packets(payload, mtu=DEFAULT_MTU):
    """IP packets of one UDP datagram with `payload` bytes (every IP fragment but the last
    carries a multiple of 8 bytes)."""
    per = (mtu - IP_HDR) & ~7
    udp = (payload + UDP_HDR) & _U32
    return 1 if udp <= mtu - IP_HDR else (udp + per - 1) // per


def request_packets(total, max_pdu=DEFAULT_MAX_PDU, mtu=DEFAULT_MTU):
    return sum(ip_packets(HDR_LEN + frag_len(f, total, max_pdu), mtu) for f in range(frag_count(total, max_pdu)))


def window_frags(window_bytes, max_pdu=DEFAULT_MAX_PDU):
    return window_bytes // max_pdu or 1


def windows(total, max_pdu=DEFAULT_MAX_PDU):
    """Fragments in each window of a request, in order (the last may be short)."""
    n, sent, wbytes, out = frag_count(total, max_pdu), 0, WINDOW_INITIAL, []
    while sent < n:
        k = min(window_frags(wbytes, max_pdu), n - sent)
        out.append(k)
        sent += k
        if wbytes < WINDOW_MAX:
            wbytes *= 2
    return out


def window_count(total, max_pdu=DEFAULT_MAX_PDU):
    return len(windows(total, max_pdu))


def ip_body_bytes(body_len, mtu=DEFAULT_MTU):
    """RPC body bytes carried by each IP packet of one fragment with body_len body bytes: the first
    packet also carries the UDP and RPC headers (1392 at MTU 1500), the others up to 1480."""
    payload = HDR_LEN + body_len
    n = ip_packets(payload, mtu)
    if n == 1:
        return [body_len]
    per = (mtu - IP_HDR) & ~7
    first = per - UDP_HDR - HDR_LEN
    out = [first]
    left = body_len - first
    for _ in range(n - 2):
        out.append(per)
        left -= per
    out.append(left)
    return out


# Linux's TCP options on every segment of an established connection: timestamps (net.ipv4.tcp_timestamps
# is 1 by default), 10 bytes padded to 12.
TCP_HDR, TCP_TIMESTAMPS = 20, 12


def tcp_mss(mtu=DEFAULT_MTU):
    """TCP payload bytes per segment on a link of this MTU: 1448 at 1500."""
    return mtu - IP_HDR - TCP_HDR - TCP_TIMESTAMPS


def tcp_segments(body_len, mtu=DEFAULT_MTU):
    """TCP segments of one message over TCP: its record (record mark, RPC header, body: rpc/client.c)
    cut at the MSS. A sender may hand a whole record down as one GSO packet (veth does), but the
    receiver's ACK rule counts full-sized segments all the same."""
    record = TCP_MARK + HDR_LEN + body_len
    return max(1, -(-record // tcp_mss(mtu)))


@dataclass
class Message:
    """The packets of one message (a request or a reply body of `total` bytes) over UDP."""
    total: int
    max_pdu: int = DEFAULT_MAX_PDU
    mtu: int = DEFAULT_MTU
    frags: list = field(init=False)        # body bytes per fragment
    ip: list = field(init=False)           # body bytes per IP packet, all fragments in order
    windows: list = field(init=False)      # fragments per window

    def __post_init__(self):
        n = frag_count(self.total, self.max_pdu)
        self.frags = [frag_len(f, self.total, self.max_pdu) for f in range(n)]
        self.ip = [b for f in self.frags for b in ip_body_bytes(f, self.mtu)]
        self.windows = windows(self.total, self.max_pdu)

    @property
    def extra_ip_packets(self):
        """Per fragment, the IP packets beyond its first: a fragment larger than one IP packet's body
        is cut into IP fragments by the sender and reassembled by the receiver."""
        return [len(ip_body_bytes(f, self.mtu)) - 1 for f in self.frags]

    @property
    def acks(self):
        """Window acknowledgements (ack requests answered): every window but the last."""
        return len(self.windows) - 1

    def as_dict(self):
        return {"total": self.total, "max_pdu": self.max_pdu, "mtu": self.mtu, "frags": len(self.frags),
                "frag_bytes": self.frags, "ip_packets": len(self.ip), "ip_bytes": self.ip,
                "windows": self.windows, "acks": self.acks}


def _pad4(n):
    return (n + 3) & ~3


def request_body_bytes(proc, size):
    """Marshalled request body of a procedure for a workload size (rpc/procs.c's
    marshal_args: opaque and strings carry a 4-byte length and are padded to 4;
    `sum` sends `size` 32-bit integers after a count; fixedarg's array is the body, uncounted).
    None when unknown."""
    if proc in ("null", "incr"):
        return 0
    if proc == "fixedarg":
        return size
    if proc in ("maxarg", "echo", "courier", "courier_oneway"):
        return 4 + _pad4(size)
    if proc == "maxresult":
        return 4
    if proc == "add":
        return 8
    if proc == "sum":
        return 4 + 4 * size
    return None


def reply_body_bytes(proc, size):
    """Marshalled reply body of a procedure for a workload size (rpc/procs.c's result marshalling:
    maxresult and concat return opaque data, echo the data and a 32-bit length, incr and sum one
    64-bit integer, add and courier one 32-bit integer; null, maxarg, courier_oneway and fixedarg
    nothing). None when unknown."""
    if proc in ("null", "maxarg", "courier_oneway", "fixedarg"):
        return 0
    if proc in ("add", "courier"):
        return 4
    if proc in ("incr", "sum"):
        return 8
    if proc == "maxresult":
        return 4 + _pad4(size)
    if proc == "echo":
        return 4 + _pad4(size) + 4
    return None
