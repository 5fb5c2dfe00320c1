"""The reference RPC's wire format as the tests write and count it, apart from rpc/wire.c so that the tests
check it: the PDU header (rpc/wire.h), fragment and window arithmetic for the default --max-pdu 4096
and --max-msg 262144, and each procedure's marshalled sizes (rpc/procs.c)."""
from __future__ import annotations

import struct

from rpcscope.collectors.capture import proc_max_size

LOOPBACK = "127.0.0.1"

# Ids 0-9 are the RPC's own procedures, 16-79 plugged-in ones (rpc/procs.h: PROCS_PLUGIN_BASE,
# at most PROCS_PLUGIN_MAX; rpc-server plugs in the stub study's); from here on nothing is served.
UNKNOWN_PROC_MIN = 80
PROCS = ["null", "incr", "maxarg", "maxresult", "add", "sum", "concat", "echo", "courier", "courier_oneway", "fixedarg"]

# wire.h arithmetic for the default --max-pdu 4096 and --max-msg 262144
HDR_LEN = 80
MAX_PDU = 4096
FRAG_BODY = MAX_PDU - HDR_LEN  # 4016
MAX_MSG = 256 << 10
WINDOW_INITIAL, WINDOW_MAX = 4096, 32768


# The PDU header (wire.h): 0 version, 1 type, 2 flags, 3 drep, 4 magic "RPCS", 8 interface id,
# 24 activity, 40 boot time, 48 seq, 52 proc, 54 reserved, 56 frag num, 60 frag len,
# 64 total len, 68 window, 72 status, 76 reserved.
INTERFACE_ID = bytes([0x72, 0x70, 0x63, 0x73, 0x63, 0x6F, 0x70, 0x65, 0x2D, 0x72, 0x65, 0x66, 0x2D, 0x76, 0x31, 0x00])
T_REQUEST, T_RESPONSE, T_ACKREQ, T_ACK, T_REJECT = range(5)
F_LAST, F_ACKREQ, F_ONEWAY, F_RETRANS = 0x01, 0x02, 0x04, 0x08
MAGIC = 0x52504353


def pack_header(*, ptype=T_REQUEST, flags=0, drep=0x00, activity=bytes(16), seq=0, proc=0, frag_num=0,
                frag_len=0, total_len=0, window=0, status=0, version=1, magic=MAGIC, boot=0,
                iface=INTERFACE_ID) -> bytes:
    """An 80-byte PDU header as wire.c encodes it (multi-byte fields in the order drep names)."""
    order = "<" if drep == 0x10 else ">"
    return struct.pack(order + "BBBBI16s16sQIHHIIIIII", version, ptype, flags, drep, magic, iface, activity, boot,
                       seq, proc, 0, frag_num, frag_len, total_len, window, status, 0)


assert len(pack_header()) == HDR_LEN


def unpack_header(d: bytes) -> dict:
    f = struct.unpack(">BBBBI16s16sQIHHIIIIII", d[:HDR_LEN])
    return {"type": f[1], "flags": f[2], "activity": f[5], "seq": f[8], "frag_num": f[11], "frag_len": f[12],
            "total_len": f[13], "window": f[14], "status": f[15]}


def pad4(n: int) -> int:
    return (n + 3) & ~3


def frag_count(total: int) -> int:
    return 1 if total == 0 else -(-total // FRAG_BODY)


def frag_len(frag: int, total: int) -> int:
    off = frag * FRAG_BODY
    return 0 if off >= total else min(FRAG_BODY, total - off)


def window_count(total: int) -> int:
    nfrags, sent, windows, wbytes = frag_count(total), 0, 0, WINDOW_INITIAL
    while sent < nfrags:
        sent += max(1, wbytes // MAX_PDU)
        windows += 1
        wbytes = min(wbytes * 2, WINDOW_MAX)
    return windows


def request_bytes(proc: str, size: int) -> int:
    """Bytes of the marshalled request body (procs.c's marshal_args)."""
    return {
        "null": 0, "incr": 0, "add": 8, "maxresult": 4, "sum": 4 + 4 * size, "fixedarg": size,
        "concat": 4 + pad4(size // 2) + 4 + pad4(size - size // 2),
    }.get(proc, 4 + pad4(size))


def reply_bytes(proc: str, size: int) -> int:
    return {
        "null": 0, "maxarg": 0, "courier_oneway": 0, "fixedarg": 0, "incr": 8, "sum": 8, "add": 4, "courier": 4,
        "maxresult": 4 + pad4(size), "concat": 4 + pad4(size), "echo": 4 + pad4(size) + 4,
    }[proc]


def max_size(proc: str, max_msg: int = MAX_MSG) -> int:
    """procs.c's proc_max_size: the largest --size rpc-client accepts (one Python copy, the collectors')."""
    return proc_max_size(proc, max_msg)
