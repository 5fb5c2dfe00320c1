"""Link rates and payload sizes as people write them on the command line.

    parse_rate("10mbit") -> 10_000_000      parse_rate("none") -> None (an unshaped link)
    fmt_rate(10_000_000) -> "10mbit"        fmt_rate(None) -> "unshaped"
    parse_sizes("0,1392,4016") -> [0, 1392, 4016]

A rate is a number with an optional k, m or g (10^3, 10^6, 10^9) and an optional unit: bit (bits per
second, the default) or bps (bytes per second, as tc reads it). fmt_rate writes what parse_rate reads
back to the same value, so a recorded rate can be given to `rpcscope testbed up --link-rate` again.

Sizes are payload byte counts separated by commas, each from 0 to MAX_SIZE, none repeated.
"""
import re

RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]?)(bit|bps)?$", re.I)
PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
UNIT = {"bit": 1, "bps": 8}
MIN_RATE, MAX_RATE = 8_000, 100_000_000_000           # 8kbit to 100gbit
UNSHAPED = ("", "none", "0", "off", "unshaped")
EXAMPLES = "e.g. 10mbit, 100mbit, 1gbit or none"
MAX_SIZE = 1 << 20


class UnitError(ValueError):
    """A value that is not a rate, or one out of range; the message names it and what to write."""


def parse_rate(text):
    """Bits per second (int) from '10mbit', '1.5mbit', '1gbit', '125kbps', '10m' or a bare number of
    bits; None for an unshaped link ('none', 'off', '0', 'unshaped' or nothing)."""
    if text is None or str(text).strip().lower() in UNSHAPED:
        return None
    m = RATE_RE.match(str(text).strip())
    if not m:
        raise UnitError(f"{text!r} is not a rate; use {EXAMPLES}")
    bits = round(float(m.group(1)) * PREFIX[m.group(2).lower()] * UNIT[(m.group(3) or "bit").lower()])
    if not MIN_RATE <= bits <= MAX_RATE:
        raise UnitError(f"{text!r} is out of range (8kbit to 100gbit)")
    return bits


def fmt_rate(bits):
    """'10mbit' for 10_000_000: the largest unit that divides the rate exactly; 'unshaped' for none."""
    if not bits:
        return "unshaped"
    bits = round(bits)
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits >= mult and bits % mult == 0:
            return f"{bits // mult}{unit}"
    return f"{bits}bit"


def parse_sizes(text, option="--sizes", allow_empty=False):
    """Byte counts from '0,1392,4016' (blanks and empty items ignored); [] for nothing where allow_empty
    (None reads as nothing). A UnitError names the option and what to write."""
    try:
        sizes = [int(s) for s in str(text if text is not None else "").split(",") if s.strip()]
    except ValueError:
        raise UnitError(f"{option} {text!r}: give byte counts separated by commas, e.g. 0,1392,4016,8032") from None
    if not sizes and not allow_empty:
        raise UnitError(f"{option} {text!r}: give one or more byte counts, e.g. 0,4016")
    if any(not 0 <= s <= MAX_SIZE for s in sizes):
        raise UnitError(f"{option} {text!r}: sizes are byte counts from 0 to {MAX_SIZE}")
    if len(set(sizes)) != len(sizes):
        raise UnitError(f"{option} {text!r}: a size is repeated")
    return sizes
