"""What-if changes to an RTT model (Firefly RPC, section 4.2: a faster network, a busy-waiting caller ...).

A change is SELECTOR=VALUE:
    SELECTOR  a step id (C8, C8', S2), a device.step (network.transmit), a device (network), or a
              term name (Tsendmsg'(0)); a step id also matches a combined row (C16 matches C16+C17).
    VALUE     0.5x  scale the unit cost (a and b) by 0.5
              30us  set the unit cost per occurrence to 30 us (ns, us, ms; a bare number is us)
              +30us / -30us   add to the unit cost per occurrence (clipped at 0)
"""
from __future__ import annotations

import re

from .model import OTHER_PATH_RULE

UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
RATE_UNITS = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_change(spec):
    """'C8=0.5x' -> (selector, kind, value): kind is 'scale', 'set' or 'add' (value in us)."""
    if "=" not in spec:
        raise ValueError(f"--set {spec!r}: expected SELECTOR=VALUE, e.g. C8=0.5x, network=+20us, S2=0")
    sel, val = spec.split("=", 1)
    sel, val = sel.strip(), val.strip().lower()
    if not sel:
        raise ValueError(f"--set {spec!r}: empty selector")
    m = re.fullmatch(r"x?([0-9.]+(?:e-?\d+)?)x?", val)
    if m and (val.endswith("x") or val.startswith("x")):
        return sel, "scale", float(m.group(1))
    m = re.fullmatch(r"([+-]?)([0-9.]+(?:e-?\d+)?)(ns|us|ms|s)?", val)
    if not m:
        raise ValueError(f"--set {spec!r}: value must be like 0.5x, 30us, +30us or -2.5us")
    v = float(m.group(2)) * UNITS[m.group(3) or "us"]
    if m.group(1):
        return sel, "add", v if m.group(1) == "+" else -v
    return sel, "set", v


def parse_rate(s):
    m = re.fullmatch(r"([0-9.]+)\s*([a-z]*?)(?:/s|ps)?", s.strip().lower())
    if not m or m.group(2) not in RATE_UNITS:
        raise ValueError(f"link rate {s!r}: expected e.g. 100mbit, 1gbit, 25gbit")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def matches(term, sel):
    if sel in (term.step, term.term, term.device, f"{term.device}.{term.step}"):
        return True
    return sel in term.step.split("+")


def apply(model, sel, kind, value, why=None):
    """Change every matching term in place; returns [(term label, before unit a, after unit a, note)]."""
    hit = [t for t in model.terms if matches(t, sel)]
    if not hit:
        raise ValueError(f"no term matches {sel!r} (steps: {', '.join(dict.fromkeys(t.step for t in model.terms))})")
    out = []
    for t in hit:
        before = (t.a_us, t.b_us_per_byte, t.c_us_per_extra_ip_packet, t.d_us_per_piggybacked_ack,
                  t.e_us_per_fragmented_datagram, t.f_us_per_followed_fragment)
        if kind == "scale":
            t.a_us *= value
            t.b_us_per_byte *= value
            t.c_us_per_extra_ip_packet *= value
            t.d_us_per_piggybacked_ack *= value
            t.e_us_per_fragmented_datagram *= value
            t.f_us_per_followed_fragment *= value
        elif kind == "set":
            t.a_us, t.b_us_per_byte, t.c_us_per_extra_ip_packet, t.d_us_per_piggybacked_ack = value, 0.0, 0.0, 0.0
            t.e_us_per_fragmented_datagram = t.f_us_per_followed_fragment = 0.0
        else:
            t.a_us = max(0.0, t.a_us + value)
        out.append({"device": t.device, "step": t.step, "term": t.term, "change": why or f"{sel} {kind} {value:g}",
                    "a_us_before": before[0], "b_before": before[1], "c_us_before": before[2], "d_us_before": before[3],
                    "e_us_before": before[4], "f_us_before": before[5],
                    "a_us_after": t.a_us, "b_after": t.b_us_per_byte, "c_us_after": t.c_us_per_extra_ip_packet,
                    "d_us_after": t.d_us_per_piggybacked_ack, "e_us_after": t.e_us_per_fragmented_datagram,
                    "f_us_after": t.f_us_per_followed_fragment})
    return out


def link_rate(model, new_bps, base_bps=None):
    """Rescale the network's terms (transmission and inter-packet gap) by base rate / new rate."""
    base = base_bps or model.link_rate_bps
    if not base:
        raise ValueError("the model does not say its link rate: give --base-rate (e.g. 1gbit)")
    if not any(t.device == "network" for t in model.terms):
        raise ValueError("the model has no network terms (loopback or veth captures have no wire time)")
    return apply(model, "network", "scale", base / new_bps, f"link {base / 1e6:g} -> {new_bps / 1e6:g} Mbit/s")


BUSY_WAIT_STEPS = ("C16", "S2")


def busy_wait(model, cost_us=0.0):
    """The waiting thread spins instead of sleeping: its wake-up steps (C16 client, S2 server) cost
    cost_us. A combined row (the paper's C16+C17, S2+S3) is set as a whole."""
    out = []
    for s in BUSY_WAIT_STEPS:
        if any(matches(t, s) for t in model.terms):
            out += apply(model, s, "set", cost_us, f"busy wait: {s} = {cost_us:g} us")
    # A reader that spins never sleeps: the untraced runs' extra sleeps and interrupts go too.
    for label in dict.fromkeys(t.step for t in model.terms if t.rule == OTHER_PATH_RULE):
        out += apply(model, label, "set", 0.0, f"busy wait: no {label}")
    if not out:
        raise ValueError("the model has no wake-up steps (C16, S2) to drop")
    return out


def compare(before, after):
    rows = []
    for s in before.sizes:
        b, a = before.calculated(s), after.calculated(s)
        rows.append({"size": s, "before_us": b, "after_us": a, "diff_us": a - b,
                     "diff_pct": (a - b) * 100.0 / b if b else None, "measured_us": before.measured_us.get(s)})
    return rows
