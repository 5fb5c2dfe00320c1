"""What one call of a target RPC writes to its sockets, from its protocol's arithmetic: the bytes the
client writes for the request and the server for the reply, their marshalled bodies, and the packets the
kernel cuts them into. The target model (analysis/targetmodel.py) counts its units with these.

ONC RPC (libtirpc; RFC 5531, peers/tirpc/peer.x compiled by rpcgen): a call's header is 40 bytes (xid,
message type, RPC version, program, version, procedure, then an AUTH_NONE credential and verifier of 8
bytes each), an accepted reply's 24 (xid, type, reply status, verifier, accept status). XDR carries an
opaque<> as a 4-byte length and its bytes padded to 4. Over TCP each message is one record fragment
behind a 4-byte record mark.

gRPC (HTTP/2; peers/grpc/peer.proto): a message is a DATA frame (a 9-byte frame header per 16384 bytes of
frame payload) holding the 5-byte gRPC prefix and the protobuf message (a bytes field: a tag byte, the
length as a varint, the bytes; proto3 leaves an empty field out). The request has a HEADERS frame before
it and the reply HEADERS before and trailers after: HPACK-coded, the connection's dynamic table keeps
them the same size from call to call, but that size is the encoder's, so it is read from a capture
(`header_bytes`: the measured stream bytes less the arithmetic's, at the fitted sizes).

The reference RPC (rpc/wire.h through rpcscope/packets.py): its 80-byte header and the body; over TCP a
record mark before them. Over UDP one exchange holds at most one PDU: a larger body takes windows and
several exchanges a call, which the kernel-only path does not add up (analysis/TARGET.md).

Packets: over UDP the IP packets of the datagram (the first carries the UDP header; fragments of 1480
bytes at MTU 1500: analysis/network.py), over TCP on the testbed's veth one GSO packet per 64 KiB of a
send.

    ex = exchange("libtirpc", "udp", "echo", 4016)       # Exchange: bytes, bodies, packets each way
"""
from __future__ import annotations

from dataclasses import dataclass

from rpcscope import packets as P

from . import network as N

TARGETS = ("reference", "libtirpc", "grpc")
ONC_CALL_HDR, ONC_REPLY_HDR, ONC_RECORD_MARK = 40, 24, 4
H2_FRAME_HDR, H2_MAX_FRAME, GRPC_PREFIX = 9, 16384, 5
GSO_MAX = 65536


class WireError(ValueError):
    """A target, procedure or size whose messages this arithmetic does not know."""


@dataclass(frozen=True)
class Exchange:
    """One call's request and reply as the sockets carry them."""
    request_bytes: int      # what the client's sends write (UDP: the datagram's payload)
    reply_bytes: int
    request_body: int       # the marshalled arguments and results
    reply_body: int
    request_packets: tuple  # IP packet lengths (UDP) or GSO packet payloads (TCP), in order
    reply_packets: tuple

    @property
    def bytes(self):
        return self.request_bytes + self.reply_bytes


def _pad4(n):
    return (n + 3) & ~3


def _varint(n):
    k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


def _pb_bytes(n):
    """A protobuf message of one bytes field of n bytes (field 1); proto3 omits an empty one."""
    return 0 if n == 0 else 1 + _varint(n) + n


def bodies(target, proc, size):
    """(request body, reply body) in bytes; WireError where the arithmetic does not know the procedure."""
    if target == "reference":
        q, r = P.request_body_bytes(proc, size), P.reply_body_bytes(proc, size)
    elif target == "libtirpc":
        opaque = 4 + _pad4(size)
        q, r = {"null": (0, 0), "add": (8, 4), "sum": (4 + 4 * size, 8), "echo": (opaque, opaque),
                "maxarg": (opaque, 0), "maxresult": (4, opaque)}.get(proc, (None, None))
    elif target == "grpc":
        count = 0 if size == 0 else 1 + _varint(size)
        q, r = {"null": (0, 0), "echo": (_pb_bytes(size), _pb_bytes(size)), "maxarg": (_pb_bytes(size), 0),
                "maxresult": (count, _pb_bytes(size))}.get(proc, (None, None))
    else:
        raise WireError(f"target {target!r}: the arithmetic knows {', '.join(TARGETS)}")
    if q is None or r is None:
        raise WireError(f"{target} procedure {proc!r}: its message sizes depend on the values sent, or are unknown "
                        f"to analysis/targetwire.py")
    return q, r


def _grpc_message(body):
    payload = GRPC_PREFIX + body
    return payload + H2_FRAME_HDR * max(1, -(-payload // H2_MAX_FRAME))


def stream_bytes(target, transport, proc, size, header_bytes=(0, 0)):
    """(request, reply) bytes the two sides write for one call, header_bytes added (gRPC's HPACK frames)."""
    q, r = bodies(target, proc, size)
    if target == "libtirpc":
        mark = ONC_RECORD_MARK if transport == "tcp" else 0
        return mark + ONC_CALL_HDR + q, mark + ONC_REPLY_HDR + r
    if target == "grpc":
        if transport != "tcp":
            raise WireError("gRPC runs over TCP only")
        return _grpc_message(q) + header_bytes[0], _grpc_message(r) + header_bytes[1]
    mark = P.TCP_MARK if transport == "tcp" else 0
    if transport == "udp" and max(q, r) > P.frag_body():
        raise WireError(f"the reference RPC's {proc} at {size} bytes takes more than one PDU over UDP: several "
                        f"exchanges a call, which the kernel-only path does not add up")
    return mark + P.HDR_LEN + q, mark + P.HDR_LEN + r


def packets(transport, nbytes, mtu=P.DEFAULT_MTU):
    """The packets one message's bytes take: IP packet lengths (UDP) or GSO payloads (TCP)."""
    if transport == "udp":
        return tuple(N.udp_ip_lengths(nbytes, mtu))
    full, rest = divmod(nbytes, GSO_MAX)
    return (GSO_MAX,) * full + ((rest,) if rest or not full else ())


def exchange(target, transport, proc, size, mtu=P.DEFAULT_MTU, header_bytes=(0, 0)):
    """The Exchange of one call at a workload size."""
    qb, rb = bodies(target, proc, size)
    q, r = stream_bytes(target, transport, proc, size, header_bytes)
    return Exchange(request_bytes=q, reply_bytes=r, request_body=qb, reply_body=rb,
                    request_packets=packets(transport, q, mtu), reply_packets=packets(transport, r, mtu))
