"""The round-trip-time model: calculated RTT = sum over terms of count x unit cost (DCE study, Table 2).

A model is a list of terms. A term is one step (or a device's share: controller, network) with
    a unit cost per occurrence, a + b * bytes (microseconds; b in us per byte), plus c per IP
    packet beyond the first of each datagram it handles (the IP fragments of a UDP fragment), d per
    ACK of the request it takes with the reply (TCP), e per datagram it handles that is cut into
    IP fragments at all and f per request fragment whose send goes on past the server's wake-up on the
    path (followed_fragments), and per size: how many times it happens on the round-trip path
    (count), the mean bytes one occurrence handles (bytes) and those extra IP packets, piggybacked
    ACKs, fragmented datagrams and followed fragments in all (extra_ip_packets, piggybacked_acks,
    fragmented_datagrams, followed_fragments).
Counts and bytes come from the protocol's own arithmetic (analysis/packets.py) through an
occurrence rule (RULES below), or, for the paper's Table 2, from the table itself.

    fit(costs, holdout=..., steps=...)   fit every term's unit cost from measured per-step costs
    Model.calculated(size)               sum of count x unit cost
    Model.error_rows()                   % Error = (Measured - Calculated) x 100 / Measured, per size
    Model.to_json() / Model.from_json()  the model file that `rpcscope whatif` reads
    paper_dce()                          the DCE study's Table 2 (NULL, 1392, 4016) as a model
    load_costs(path)                     the fit's input: see analysis/MODEL.md

Nothing here needs numpy.
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from . import packets as P

MODEL_FORMAT = "rpcscope-model/1"
COSTS_FORMAT = "rpcscope-step-costs/1"
GOAL_FIT_PCT = 2.0       # issue 6: |% error| at every captured size
GOAL_HOLDOUT_PCT = 5.0   # ... and at every held-out size

# ------------------------------------------------------------------ occurrence rules


def _req_reply(size, params):
    reply = params.get("reply", 0)
    reply_total = size if reply == "same" else int(reply)
    over = int(params.get("request_overhead", 0))
    body = P.request_body_bytes(params["proc"], size) if params.get("proc") else None
    if body is not None and "request_overhead" not in params:
        over = body - size          # the marshalled arguments: maxarg's 4016 bytes are a 4020-byte body
    mtu, pdu = int(params.get("mtu", P.DEFAULT_MTU)), int(params.get("max_pdu", P.DEFAULT_MAX_PDU))
    if params.get("transport") == "tcp":
        # Over TCP a message is one record, sent and received whole (the kernel segments it): one
        # "fragment", one window, no acks.
        pdu = 1 << 30
    return P.Message(size + over, pdu, mtu), P.Message(reply_total, pdu, mtu)


# rule -> function(request Message, reply Message) -> bytes handled by each occurrence
RULES = {
    "none": lambda q, r: [],
    "call": lambda q, r: [0],
    "call_request": lambda q, r: [q.total],
    "call_reply": lambda q, r: [r.total],
    "request_frags": lambda q, r: list(q.frags),
    "request_frags_multi": lambda q, r: list(q.frags) if len(q.windows) > 1 else [],
    "reply_frags": lambda q, r: list(r.frags),
    "server_sends": lambda q, r: list(r.frags) + [0] * q.acks,    # reply fragments and window acks
    "client_receives": lambda q, r: list(r.frags) + [0] * q.acks,
    "windows": lambda q, r: [0] * len(q.windows),                 # one wait per window
    "acks": lambda q, r: [0] * q.acks,
    "request_ip": lambda q, r: list(q.ip),
    "reply_ip": lambda q, r: list(r.ip),
    "call_bytes": lambda q, r: [q.total + r.total],               # once per call, both messages' bytes
    "request_windows": lambda q, r: _window_bytes(q),             # once per window, the bytes it sends
    "request_frags_but_last": lambda q, r: _frags_but_last(q),
    "request_window_ends": lambda q, r: [q.frags[i] for i in _window_end_frags(q)],
    "request_window_wakes": lambda q, r: [q.frags[i] for i in _window_first_frags(q)],
}


def _final_window_overlaps(q):
    """Whether the request's final window holds more than one fragment: its last fragment is then
    sent while the server takes the one before it, so that the path leaves the client's send of it
    and passes through the server's receive of both."""
    return len(q.windows) > 0 and q.windows[-1] > 1


def _frags_but_last(q):
    """The request fragments whose send is on the path: all but the final window's last one when
    that window holds more than one (_final_window_overlaps)."""
    return list(q.frags[:-1]) if _final_window_overlaps(q) else list(q.frags)


def _window_first_frags(q):
    """Indices of the first fragment of each window: the one whose arrival wakes the server waiting for
    that window. Why a rule of its own (request_window_wakes: once per window, the bytes of that
    fragment): over UDP the server's wake-up on the path (S2) grows with the datagram that wakes it, not
    with the window. On session 31's host it took 1.95, 2.25, 2.47 us a window at 0, 1392 and 4016
    bytes (waking datagrams of 4, 1396 and, on average, 2010 bytes: 4016 and a 4-byte tail) and
    2.88-2.92 from 8032 on, where every window begins with a 4016-byte fragment though the windows
    hold 4016 to 12052 bytes; a line through the windows' bytes put 24096 1.2 us high
    (runs/run-20261127-151245, analysis/MODEL.md session 31)."""
    starts, i = [], 0
    for k in q.windows:
        starts.append(i)
        i += k
    return starts


def _window_last_frags(q):
    """Indices of the last fragment of each window: the one the server waits for to end it."""
    ends, i = [], 0
    for k in q.windows:
        i += k
        ends.append(i - 1)
    return ends


def _window_end_frags(q):
    """Indices of the fragments whose receive is on the path: the last of each window (the one that
    ends the server's wait for it), and the one before the last when the final window holds more than
    one."""
    ends = _window_last_frags(q)
    if _final_window_overlaps(q):
        ends.insert(len(ends) - 1, ends[-1] - 1)
    return ends


def _window_bytes(q):
    out, i = [], 0
    for k in q.windows:
        out.append(sum(q.frags[i:i + k]))
        i += k
    return out

# The round-trip path's segments that are no catalog step (analysis/rtp.py: time between two marks
# of one thread, a preemption, a block without a waking) become terms too, once per call and growing
# with the bytes of the call: without them the terms cannot add up to the RTT.
GAP_RULE = "call_bytes"

# The reference RPC's steps (tracepoints/steps.toml) and the rule that counts each one.
STEP_RULES = {
    "C1": "call_request", "C2": "call_request", "C3": "call_request", "C4": "call_request",
    "C5": "call_request", "C6": "call_request", "C7": "request_frags", "C8": "request_frags",
    "C8'": "request_frags", "C8''": "request_frags", "C9": "request_frags", "C10": "windows",
    "C11": "windows", "C12": "request_frags", "C13": "request_frags", "C14": "windows",
    "C15": "client_receives", "C16": "windows", "C17": "windows", "C18": "client_receives",
    "C19": "call_reply", "C20": "call", "C21": "call", "C22": "acks",
    "S1": "request_frags", "S2": "request_frags", "S3": "request_frags", "S4": "request_frags",
    "S5": "call_request", "S6": "call_request", "S7": "call_reply", "S8": "server_sends",
    "S9": "server_sends", "S9'": "server_sends", "S9''": "server_sends", "S10": "server_sends",
    "S11": "call", "S12": "request_frags", "S13": "server_sends", "S14": "request_frags",
    "S15": "acks", "S16": "request_frags_multi",
}


def occurrences(rule, size, params):
    """(count, mean bytes per occurrence) of a rule at a request size."""
    q, r = _req_reply(size, params)
    occ = RULES[rule](q, r)
    return len(occ), (sum(occ) / len(occ) if occ else 0.0)


def _request_frag_indices(rule, q):
    """Which of the request q's fragments a per-fragment rule's occurrences are (none for other rules)."""
    return {"request_frags": range(len(q.frags)),
            "request_frags_multi": range(len(q.frags)) if len(q.windows) > 1 else (),
            "request_frags_but_last": range(len(_frags_but_last(q))),
            "request_window_ends": _window_end_frags(q),
            "request_window_wakes": _window_first_frags(q)}.get(rule, ())


def _per_fragment_sum(rule, q, per_req, per_rep):
    """The sum over a rule's occurrences of a per-fragment figure (per_req for each of the request q's
    fragments, per_rep for the reply's): the fragments each rule's occurrences send or receive."""
    req, rep = sum(per_req), sum(per_rep)
    whole = {"call_request": req, "request_windows": req, "call_reply": rep, "reply_frags": rep,
             "server_sends": rep, "client_receives": rep, "call_bytes": req + rep}
    if rule in whole:
        return whole[rule]
    return sum(per_req[i] for i in _request_frag_indices(rule, q))


def extra_ip_packets(rule, size, params):
    """IP packets beyond the first of each UDP fragment that a rule's occurrences send or receive, in
    all. Bytes alone do not tell what a datagram cut into IP fragments costs: on this project's veth
    testbed the client's send after the device hand-off (C8'') costs about 0.1 us for a one-packet
    fragment and about 2 us more for every further IP packet, so a unit cost linear in bytes
    under-counts 1392 (two packets) and over-counts 0. Over TCP there is no IP fragmentation (the
    kernel cuts a record into segments itself): 0."""
    if params.get("transport") == "tcp":
        return 0
    q, r = _req_reply(size, params)
    return _per_fragment_sum(rule, q, list(q.extra_ip_packets), list(r.extra_ip_packets))


def fragmented_datagrams(rule, size, params):
    """The UDP datagrams cut into more than one IP packet among a rule's occurrences (the fragments
    whose extra_ip_packets are above zero). What a fragmented datagram costs is not all per packet:
    the sender's ip_do_fragment and the receiver's reassembly queue (inet_frag_find, ip_frag_reasm)
    are set up once per datagram. On the veth testbed the client's send after the device hand-off
    (C8'') took ~4.1 us more for a datagram of two IP packets (1392 bytes) and ~7.0 us more for one
    of three (a 4016-byte fragment): ~1.2 us per fragmented datagram and ~2.9 us per further packet,
    where a cost per packet alone (3.6 us) missed 1392 by 0.5 us (2 % of its RTT;
    runs/run-20261125-222255, analysis/MODEL.md). Over TCP: 0."""
    if params.get("transport") == "tcp":
        return 0
    q, r = _req_reply(size, params)
    return _per_fragment_sum(rule, q, [1 if x else 0 for x in q.extra_ip_packets],
                             [1 if x else 0 for x in r.extra_ip_packets])


# The client's send after the device hand-off (C8'') is where the server's wake-up happens on the veth
# testbed: the request's receive runs in the sender's softirq, through reassembly and the socket's
# queue to the waking of the server. From that waking the walk (analysis/rtp.py) follows the server
# where the server's work is what the call waits for (the window's last fragment), but stays on the
# client where the client goes on to send the window's next fragment, and there the rest of the send,
# from the waking to its return, is on the path as a piece of its own: 2.9-3.6 us a piece in
# runs/run-20261128-053140's example calls (UDP 16064 one, 24096 three), none at 0-8032. Held to
# a cost per fragment, C8'' came out 2.2 us over at 8032 and 4.6 under at 24096 in that run. So its
# unit cost has a column for those fragments (f per followed fragment), counted by the protocol's
# arithmetic: the on-path fragments whose next fragment is of the same window and on the path too.
SENDS_ON_STEPS = ("C8''",)


def followed_fragments(step, rule, size, params):
    """The request fragments among a rule's occurrences whose next fragment belongs to the same window
    and is among them too, for the steps in SENDS_ON_STEPS over UDP; else 0."""
    if params.get("transport") == "tcp" or step not in SENDS_ON_STEPS or rule not in RULES:
        return 0
    q, _ = _req_reply(size, params)
    on, starts = set(_request_frag_indices(rule, q)), set(_window_first_frags(q))
    return sum(1 for i in on if i + 1 in on and i + 1 not in starts)


# Over TCP the server's ACK of a request rides on the reply when the request is one segment: Linux acks
# at once only when more than one full segment is unacknowledged (__tcp_ack_snd_check), else it delays
# the ACK, and the reply carries it a few microseconds later. The client's TCP then takes that ACK
# (tcp_ack: the request leaves the retransmit queue and is freed) in the receive that wakes the client
# (C15), on the path. For a request of two segments or more the server's pure ACK goes out first and the
# client takes it while it waits, beside the path. No traced event marks that work apart, so it is a
# column of C15's unit cost (d per piggybacked ACK), fitted from the sizes that have it (MODEL.md).
PIGGYBACKED_ACK_STEPS = ("C15",)


def piggybacked_acks(step, size, params):
    """ACKs of the request that a step takes with the reply on the path: 1 for the client's receive
    (C15) over TCP when the request's record fits one segment, else 0."""
    if params.get("transport") != "tcp" or step not in PIGGYBACKED_ACK_STEPS:
        return 0
    q, _ = _req_reply(size, params)
    return 1 if P.tcp_segments(q.total, int(params.get("mtu", P.DEFAULT_MTU))) == 1 else 0


# The same column in the server's receive (S1): over TCP, where the server's TCP acks the request before
# it wakes the server (the fast path of tcp_rcv_established, at 1392/1393 bytes: MODEL.md), the walk cuts
# the ACK's send, from its first transmit to the waking, out as its own segment (rtp.py SENT_BEFORE_WAKEUP),
# but the ACK is built before that transmit, inside S1, which no event marks. S1 cost 0.5-0.6 us more at
# 1392 than its line through the other sizes in every capture of sessions 23-26 (runs/run-20261126-235147:
# 4.21 against 3.52-3.78 us). Its count follows the cut segment: the path's at the nearest fitted size.
ACK_BEFORE_WAKEUP_STEPS = {"S1": "server sends before the wake-up"}     # rtp.py SENT_BEFORE_WAKEUP (a test checks)


def acks_sent_before_wakeup(step, size, costs, fit_sizes):
    """1 where the server's receive (S1) builds the ACK it sends before it wakes the server: where the
    path has that send (the segment ACK_BEFORE_WAKEUP_STEPS names) at the nearest fitted size, else 0."""
    seg = ACK_BEFORE_WAKEUP_STEPS.get(step)
    if seg is None or not fit_sizes:
        return 0
    seen = (costs.sizes.get(nearest_fitted(size, fit_sizes), {}).get(seg) or {}).get("path_count") or 0.0
    return 1 if seen >= 0.5 else 0


def default_steps(available):
    """The catalog's round-trip-path steps, C8 and S9 replaced by C8' and S9' (the part before the
    device hand-off, DCE's sendmsg') when the data has them."""
    from rpcscope.tracepoints import STEPS
    out = []
    for s in STEPS:
        if not s["rtp"]:
            continue
        sid = s["id"]
        if sid + "'" in available:
            sid += "'"
        out.append(sid)
    return out


def _device(step):
    if step.startswith(("client", "server")):
        return step.split()[0]
    if step not in STEP_RULES:
        return "path"
    return "client" if step.startswith("C") else "server" if step.startswith("S") else step.split(".")[0]


def _rule(sid, params):
    return STEP_RULES.get(sid) or (params.get("term_rules") or {}).get(sid)


# ------------------------------------------------------------------ model


@dataclass
class Term:
    device: str
    step: str
    term: str
    a_us: float
    b_us_per_byte: float = 0.0
    rule: str | None = None
    # size -> {"count", "bytes" (mean), "extra_ip_packets", "piggybacked_acks", "fragmented_datagrams",
    #          "followed_fragments"}
    per_size: dict = field(default_factory=dict)
    fit: dict = field(default_factory=dict)
    c_us_per_extra_ip_packet: float = 0.0
    d_us_per_piggybacked_ack: float = 0.0
    e_us_per_fragmented_datagram: float = 0.0
    f_us_per_followed_fragment: float = 0.0

    def unit(self, nbytes):
        """The cost of one occurrence handling nbytes in a single IP packet per datagram."""
        return self.a_us + self.b_us_per_byte * nbytes

    def count(self, size):
        return self.per_size.get(size, {}).get("count", 0)

    def contribution(self, size):
        ps = self.per_size.get(size)
        if not ps or not ps["count"]:
            return 0.0
        return (ps["count"] * self.unit(ps.get("bytes", 0)) + ps.get("extra_ip_packets", 0) * self.c_us_per_extra_ip_packet
                + ps.get("piggybacked_acks", 0) * self.d_us_per_piggybacked_ack
                + ps.get("fragmented_datagrams", 0) * self.e_us_per_fragmented_datagram
                + ps.get("followed_fragments", 0) * self.f_us_per_followed_fragment)

    @property
    def label(self):
        return self.term or self.step

    def formula(self):
        return unit_formula(self.a_us, self.b_us_per_byte, self.c_us_per_extra_ip_packet, self.d_us_per_piggybacked_ack,
                            self.e_us_per_fragmented_datagram, ack_label(self.step), self.f_us_per_followed_fragment)

    def to_json(self):
        return {"device": self.device, "step": self.step, "term": self.term, "a_us": self.a_us,
                "b_us_per_byte": self.b_us_per_byte, "c_us_per_extra_ip_packet": self.c_us_per_extra_ip_packet,
                "d_us_per_piggybacked_ack": self.d_us_per_piggybacked_ack,
                "e_us_per_fragmented_datagram": self.e_us_per_fragmented_datagram,
                "f_us_per_followed_fragment": self.f_us_per_followed_fragment, "rule": self.rule,
                "per_size": {str(s): v for s, v in self.per_size.items()}, "fit": self.fit}

    @classmethod
    def from_json(cls, t):
        """A term of a model file (the coefficients a file of an older rpcscope lacks are 0)."""
        return cls(t["device"], t["step"], t.get("term", ""), float(t["a_us"]), float(t.get("b_us_per_byte", 0)),
                   t.get("rule"), {int(s): v for s, v in t["per_size"].items()}, t.get("fit", {}),
                   float(t.get("c_us_per_extra_ip_packet", 0)), float(t.get("d_us_per_piggybacked_ack", 0)),
                   float(t.get("e_us_per_fragmented_datagram", 0)), float(t.get("f_us_per_followed_fragment", 0)))


def goal_verdict(models, unsettled=(), cpu_loss=None):
    """The model's goals over every size of every transport, and whether this run can judge them: a size
    whose Measured moves between identical untraced rounds by more than its goal (noise, half the
    rounds' spread) cannot show the model within that goal except by chance; nor can a transport whose
    capture never settled (unsettled: the host's speed level changed inside every sweep). cpu_loss:
    (most, median) % of a check's time the CPUs lost between sweeps (analysis/cpuspeed.py worst_loss),
    said where the host was too noisy or a transport never settled, as the likely why. {"met",
    "sizes", "judgeable" (sizes whose noise is within their goal), "met_judgeable" (of those, the ones
    that met it: the figure a noisy run can still give), "median_noise_pct", "unsettled", "other_path"
    (the sizes, "udp 8032", whose untraced run took another path than the traced one: an error row's
    untraced_path_same False, analysis/run.py path_shape), "met_same_path" (of the others, the ones that
    met their goal), "text"}."""
    errs = [e for m in models.values() for e in m["errors"] if e.get("goal_met") is not None]
    if not errs:
        return None
    met = sum(bool(e["goal_met"]) for e in errs)
    noise = sorted(e["measured_noise_pct"] for e in errs if e.get("measured_noise_pct") is not None)
    quiet = [e for e in errs if e.get("measured_noise_pct") is not None and e["measured_noise_pct"] <= e["goal_pct"]]
    judgeable, met_quiet = len(quiet), sum(bool(e["goal_met"]) for e in quiet)
    med = noise[(len(noise) - 1) // 2] if noise else None
    text = f"model goals met at {met} of {len(errs)} sizes"
    if med is not None:
        text += (f"; Measured itself moved by a median {med:.1f} % between identical untraced rounds, and "
                 f"{judgeable} of {len(errs)} sizes moved by less than their goal"
                 + (f", of which {met_quiet} met it" if judgeable else ""))
        if judgeable < len(errs) / 2:
            text += (". The host was too noisy for this run to judge the model: a goal of 2 % cannot be "
                     "told from a measurement that moves more; run again when the host is quiet "
                     "(the noise_% columns say which sizes)")
    other = [(t, e) for t, m in models.items() for e in m["errors"]
             if e.get("goal_met") is not None and e.get("untraced_path_same") is False]
    met_same = sum(bool(e["goal_met"]) for e in errs if e.get("untraced_path_same") is not False)
    if other:
        named = ", ".join((f"{t} {e['size']}" if t != "model" else str(e["size"]))
                          + (f": {e['untraced_p50_mode']}" if e.get("untraced_p50_mode") else "") for t, e in other)
        text += (f". At {len(other)} size(s) ({named}) the untraced run took another path than the traced one "
                 f"(it blocked, or was woken by an interrupt, where the traced run did not: the sleeps and ipis "
                 f"columns), which no step cost of the traced path follows (the model counts those wake-ups at the "
                 f"wake-up calibration's costs where the capture has one: its other-path rows; where its calls "
                 f"fall in several modes, the one that holds its p50 is named); of the other "
                 f"{len(errs) - len(other)} sizes, {met_same} met their goal")
    if unsettled:
        text += (f". {', '.join(t.upper() for t in unsettled)}: the capture never settled (the host's speed "
                 f"level changed inside every sweep of the sizes), so each size's figures come from a round of "
                 f"its own in one level (the report's run summary says which), minutes apart; run again when the "
                 f"host is quiet")
    if cpu_loss and (unsettled or judgeable < len(errs) / 2):
        text += (f". Between the sweeps the testbed's CPUs lost up to {cpu_loss[0]:.0f} % (median "
                 f"{cpu_loss[1]:.0f} %) of a fixed loop's time to their fastest pace: the host ran them slower, "
                 f"or not at all, at times (rpc-cpuspeed; the report's run summary)")
    return {"met": met, "sizes": len(errs), "judgeable": judgeable, "met_judgeable": met_quiet,
            "median_noise_pct": med, "unsettled": list(unsettled),
            "cpu_lost_pct": None if not cpu_loss else {"max": cpu_loss[0], "median": cpu_loss[1]},
            "other_path": [f"{t} {e['size']}" for t, e in other], "met_same_path": met_same, "text": text + "."}


def ack_label(step):
    """What column 3 of a step's unit cost counts: the ACK the server's receive builds before it wakes the
    server (S1), or the piggybacked ACK the client's receive takes (C15)."""
    return "ACK sent before the wake-up" if step in ACK_BEFORE_WAKEUP_STEPS else "piggybacked ACK"


def unit_formula(a_us, b_us_per_byte=0.0, c_us_per_extra_ip_packet=0.0, d_us_per_piggybacked_ack=0.0,
                 e_us_per_fragmented_datagram=0.0, ack="piggybacked ACK", f_us_per_followed_fragment=0.0):
    """A unit cost as people read it: '0.735 + 0.1291 ns/B + 2.028 us/extra IP packet'."""
    out = f"{a_us:.3f}"
    if b_us_per_byte:
        out += f" {'-' if b_us_per_byte < 0 else '+'} {abs(b_us_per_byte) * 1000:.4f} ns/B"
    if c_us_per_extra_ip_packet:
        out += f" {'-' if c_us_per_extra_ip_packet < 0 else '+'} {abs(c_us_per_extra_ip_packet):.3f} us/extra IP packet"
    if d_us_per_piggybacked_ack:
        out += f" {'-' if d_us_per_piggybacked_ack < 0 else '+'} {abs(d_us_per_piggybacked_ack):.3f} us/{ack}"
    if e_us_per_fragmented_datagram:
        out += (f" {'-' if e_us_per_fragmented_datagram < 0 else '+'} {abs(e_us_per_fragmented_datagram):.3f} "
                "us/fragmented datagram")
    if f_us_per_followed_fragment:
        out += (f" {'-' if f_us_per_followed_fragment < 0 else '+'} {abs(f_us_per_followed_fragment):.3f} "
                "us/followed fragment")
    return out


@dataclass
class Model:
    terms: list
    sizes: list
    measured_us: dict = field(default_factory=dict)   # size -> measured RTT (untraced p50), us
    holdout: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    source: str = ""
    link_rate_bps: float | None = None
    notes: list = field(default_factory=list)
    reference: dict = field(default_factory=dict)     # e.g. the paper's printed sums

    def calculated(self, size):
        return sum(t.contribution(size) for t in self.terms)

    def error_rows(self):
        rows = []
        for s in self.sizes:
            calc, meas = self.calculated(s), self.measured_us.get(s)
            held = s in self.holdout
            pct = percent_error(meas, calc)
            goal = GOAL_HOLDOUT_PCT if held else GOAL_FIT_PCT
            rows.append({"size": s, "calculated_us": calc, "measured_us": meas, "percent_error": pct,
                         "holdout": held, "goal_pct": goal,
                         "goal_met": None if pct is None else abs(pct) <= goal})
        return rows

    def extend(self, sizes):
        """Add sizes to predict (counts and bytes from the protocol arithmetic); terms without a rule
        (the paper's) cannot be extended."""
        for s in sizes:
            if s in self.sizes:
                continue
            fitted = [z for z in self.sizes if z not in self.holdout]
            for t in self.terms:
                if t.rule == OTHER_PATH_RULE:       # no untraced run to count: the traced path
                    t.per_size[s] = {"count": 0.0, "bytes": 0.0, "extra_ip_packets": 0, "piggybacked_acks": 0,
                                     "fragmented_datagrams": 0, "followed_fragments": 0}
                    continue
                if t.rule is None:
                    raise ValueError(f"term {t.label} has no occurrence rule: this model cannot predict size {s}")
                if t.rule == NEAREST_RULE:
                    t.per_size[s] = {"count": t.per_size[nearest_fitted(s, fitted)]["count"], "bytes": 0.0,
                                     "extra_ip_packets": 0, "piggybacked_acks": 0, "fragmented_datagrams": 0,
                                     "followed_fragments": 0}
                    continue
                n, b = occurrences(t.rule, s, self.params)
                acks = t.per_size[nearest_fitted(s, fitted)].get("piggybacked_acks", 0) \
                    if t.step in ACK_BEFORE_WAKEUP_STEPS else piggybacked_acks(t.step, s, self.params)
                t.per_size[s] = {"count": n, "bytes": b, "extra_ip_packets": extra_ip_packets(t.rule, s, self.params),
                                 "piggybacked_acks": acks,
                                 "fragmented_datagrams": fragmented_datagrams(t.rule, s, self.params),
                                 "followed_fragments": followed_fragments(t.step, t.rule, s, self.params)}
            self.sizes.append(s)
        self.sizes.sort()
        return self

    def copy(self):
        return copy.deepcopy(self)

    def to_json(self):
        return {
            "format": MODEL_FORMAT, "source": self.source, "unit": "us", "params": self.params,
            "link_rate_bps": self.link_rate_bps, "sizes": self.sizes, "holdout": self.holdout,
            "measured_us": {str(k): v for k, v in self.measured_us.items()},
            "calculated_us": {str(s): self.calculated(s) for s in self.sizes},
            "reference": {k: {str(s): v for s, v in d.items()} for k, d in self.reference.items()},
            "notes": self.notes,
            "terms": [t.to_json() for t in self.terms],
        }

    @classmethod
    def from_json(cls, d):
        if d.get("format") != MODEL_FORMAT:
            raise ValueError(f"not a model file (format {d.get('format')!r}, expected {MODEL_FORMAT!r})")
        terms = [Term.from_json(t) for t in d["terms"]]
        return cls(terms, [int(s) for s in d["sizes"]], {int(k): v for k, v in d.get("measured_us", {}).items()},
                   [int(s) for s in d.get("holdout", [])], d.get("params", {}), d.get("source", ""),
                   d.get("link_rate_bps"), d.get("notes", []),
                   {k: {int(s): v for s, v in v2.items()} for k, v2 in d.get("reference", {}).items()})

    def save(self, path):
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def percent_error(measured, calculated):
    """The DCE study's % Error = (Measured - Calculated) x 100 / Measured."""
    if measured is None or calculated is None or not measured:
        return None
    return (measured - calculated) * 100.0 / measured


def load_model(path):
    try:
        return Model.from_json(json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise ValueError(f"{path}: cannot read a model: {e}") from None


# ------------------------------------------------------------------ fitting


@dataclass
class Costs:
    """The fit's input: per size, per step the median per-RPC total of the step's occurrences."""
    sizes: dict            # size -> {step: {"median_ns": x, "n": k, ["count": c], ["bytes": b]}}
    measured_ns: dict      # size -> measured RTT (untraced p50: its speed level's median, level_figures), ns
    params: dict = field(default_factory=dict)
    source: str = ""


# No size is credited with less noise than this (% of its RTT) when the fit weighs the sizes by how far
# their traced runs moved. 2, not 1 (session 19): since the step costs are scaled to their speed level's
# median traced p50 (level_figures), a round's overall speed no longer reaches them, and a null call whose
# traced rounds spread by 1.8 us of its 21 had weighed a fifteenth of most others and was extrapolated from
# the large sizes (UDP 0 at -3.4 % in runs/run-20261126-034449, -1.4 % with 2). Re-fitted over the 58
# captures of sessions 14-19 in runs/: 778 against 772 of 928 sizes, every size met in 13 runs
# against 12; without the weighting, 775.
SIZE_NOISE_FLOOR_PCT = 2.0


def fit(costs, holdout=(), steps=None, predict=()):
    """Fit each step's unit cost (fit_unit) over the sizes not held out; every size of the input (and
    `predict`) gets counts and a calculated RTT. `steps`: the terms on the round-trip path (default:
    default_steps)."""
    sizes = sorted(costs.sizes)
    holdout = sorted(set(holdout))
    unknown = [s for s in holdout if s not in costs.sizes]
    if unknown:
        raise ValueError(f"--holdout sizes {unknown} are not in the input (sizes: {sizes})")
    fit_sizes = [s for s in sizes if s not in holdout]
    if not fit_sizes:
        raise ValueError("every size is held out: nothing left to fit")
    available = set().union(*(set(v) for v in costs.sizes.values()))
    steps = list(steps) if steps else default_steps(available)
    params = dict(costs.params)
    # The % error is relative: each size weighs by 1 / its measured RTT squared, so that the small
    # sizes' few microseconds count as much as the large sizes' tens (unweighted when not measured).
    weights = {s: 1.0 / costs.measured_ns[s] ** 2 * 1e6 for s in fit_sizes if costs.measured_ns.get(s)} \
        if all(costs.measured_ns.get(s) for s in fit_sizes) else None
    # And by how far its traced runs moved (params["size_noise_pct"], the capture's rounds): a size whose
    # rounds caught a burst of host noise has step costs that far off, and must not bend every term's
    # fit (inverse variance, no size credited with less than SIZE_NOISE_FLOOR_PCT).
    # A size whose noise is unknown (one round in its level) weighs as the median of the others, not as
    # the quietest.
    noise = {int(k): v for k, v in (params.get("size_noise_pct") or {}).items() if v is not None}
    if weights and noise:
        unknown = statistics.median(noise.values())
        weights = {s: w * (SIZE_NOISE_FLOOR_PCT / max(SIZE_NOISE_FLOOR_PCT, noise.get(s, unknown))) ** 2
                   for s, w in weights.items()}
    terms, notes = [], []
    for sid in steps:
        rule = _rule(sid, params)
        if rule is None:
            raise ValueError(f"no occurrence rule for step {sid!r} (known: {', '.join(STEP_RULES)})")
        observed = {s: (costs.sizes[s].get(sid) or {}).get("path_count") for s in fit_sizes}
        if params.get("path_rules") and sid in STEP_RULES and all(v is not None for v in observed.values()):
            totals = {s: costs.sizes[s][sid]["median_ns"] / 1000.0 for s in fit_sizes}
            rule = path_rule(sid, observed, totals, params, weights)
        if sid not in STEP_RULES and rule == GAP_RULE and params.get("path_rules"):
            rule = NEAREST_RULE if _on_path_at_some(observed) else gap_rule(sid, costs, sizes, fit_sizes, params,
                                                                             weights)
        per_size, pts = _term_points(sid, rule, costs, sizes, fit_sizes, params)
        a, bb, c, dd, e, g, info = fit_unit(pts, weights, slope_floor(params))
        if not pts:
            notes.append(f"{sid}: never measured at a fitted size with a count > 0; unit cost 0")
        terms.append(Term(_device(sid), sid, "", a, bb, rule, per_size, info, c, dd, e, g))
    other, why = other_path_terms(sizes, params)
    terms += other
    notes += why
    level = params.get("level") or {}
    if level:
        scales = [v["traced_scale"] for v in level.values()]
        lo, hi = min(v["rounds"] or 0 for v in level.values()), max(v["rounds"] or 0 for v in level.values())
        notes.append(f"Measured at {len(level)} of {len(sizes)} sizes: the median untraced p50 of the "
                     f"{lo if lo == hi else f'{lo}-{hi}'} rounds in the kept round's speed level; their traced step costs scaled to the level's "
                     f"median traced p50 (x {min(scales):.3f} .. {max(scales):.3f}; params.level)")
    model = Model(terms, sizes, {s: v / 1000.0 for s, v in costs.measured_ns.items() if v is not None},
                  holdout, params, costs.source, params.get("link_rate_bps"), notes)
    model.extend(sorted(set(predict) - set(sizes)))
    return model


# The other path (session 25): where a size's untraced runs slept, or were woken by interrupt, more often
# per call than its traced run (analysis/run.py other_path_counts: the runs' own counters, which need no
# trace), each such wake-up costs what the capture's wake-up calibration measured on that role's CPU
# (analysis/wakeup.py: a sleep over a reader that finds its datagram come, an interrupt over a wake-up
# that finds the CPU polling). No step of the traced run pays them, and no unit cost is fitted to them:
# count x calibrated unit, as Table 2's rows, the count being what the median call pays
# (median_call_count). A held-out size's counts are its own untraced run's, as its
# Measured is; a size only predicted (--predict) has no untraced run and counts 0 (the traced path).
OTHER_PATH_RULE = "counted_in_untraced_runs"
# The wake-up right after an interrupt-borne one costs ~0.9 us more on this VM (session 28; rpc-wakecal's
# after_interrupt, wakeup.after_interrupt_us), and in the RPC the call after an interrupted call pays it
# on its next wake-up on each CPU: TCP 4016's second mode in the faster level (+1.8-2.4 us, 93-97 % of
# its calls right after one of the third mode's), its request's wake-up of the server and its reply's of
# the client ~0.9 us longer each. So each interrupt, of either role, adds one such wake-up per role:
# rows counted by AFTER_INTERRUPT_KEY (client_ipis + server_ipis), one per role at its CPU's cost.
AFTER_INTERRUPT_KEY = "after_ipis"
OTHER_PATH_TERMS = (("client", "client_sleeps", "sleep_us", "other path: sleeps"),
                    ("client", "client_ipis", "ipi_us", "other path: interrupts"),
                    ("server", "server_sleeps", "sleep_us", "other path: sleeps"),
                    ("server", "server_ipis", "ipi_us", "other path: interrupts"),
                    ("client", AFTER_INTERRUPT_KEY, "after_ipi_us", "other path: after an interrupt"),
                    ("server", AFTER_INTERRUPT_KEY, "after_ipi_us", "other path: after an interrupt"))


def median_call_count(mean):
    """What the median call pays of a wake-up that `mean` calls in one take (per call, from the runs'
    counters; negative: fewer than the traced run): the nearest whole number, 0 up to 0.5 a call, 1 up
    to 1.5, ... Why not the mean: Measured is the untraced p50, and a wake-up that a fifth of the calls
    take does not move the median call (UDP 24096 with 0.23 interrupts a call beyond the traced run's:
    the mean's 2.8 us put the calculated RTT 3.1 % above Measured, runs/run-20261126-235702). Why the
    nearest whole number: such a wake-up comes from a race at a point of the call (a window's last
    fragment against the server's going to sleep), once per such point at most, so with one point a call
    takes 0 or 1 and the median call takes it once more than half of them do; with several, a sum of
    such counts has its median at its mean rounded (within one of it). Session 25 had the median of a
    Poisson count (0 up to 0.69 a call), but UDP 8032's rounds in runs/run-20261127-001500 and
    -030748 with 0.53-0.56 interrupts a call measured 59.0-62.0 us, in the slow mode (0.78-0.99: 61.8-64.8
    us; 0.2-0.48: 48.9-50.2 us). Near 0.5 a call the p50 lies between the modes, which no count can say.
    One kind of wake-up alone; several together: median_call_counts."""
    lam, sign = abs(mean), (1 if mean >= 0 else -1)
    return sign * math.floor(lam + 0.5)


def median_call_counts(events, follows=None):
    """{key: count}: what the median call pays of each kind of wake-up, taken together. events: {key:
    (mean per call, cost of one in us)}. Each kind is taken as its whole part every call and one more in
    the fraction of calls its mean leaves (as median_call_count); the calls' extra costs are ranked, and
    the counts are those of the outcome holding the middle call. One kind alone gives median_call_count's
    answer. follows: {key: [keys]}, a kind that comes in the call after one of those kinds (the wake-up
    after an interrupt); it is as seldom in the same call as one of them as their fractions allow (their
    overlap the least the two shares can have), the others independent of each other.

    Why together (session 28): in the faster level TCP 4016's client took an interrupt in 30-40 % of its
    calls, and the call after each paid ~2 us more (AFTER_INTERRUPT_KEY), so 60-80 % of the calls paid one
    or the other and the middle call paid the cheaper, while each count alone, under half, rounds to none.
    Why apart: a call whose reply came by interrupt starts the next one late, off the race (the
    stamp experiment's TCP 4016 calls: 2-6 % of those right after one took one, against 13-26 % of all).
    Where the interrupts are in most calls (UDP 8032: 0.8 a call) most calls pay both."""
    follows = follows or {}
    keys = [k for k, (m, _c) in events.items() if m]
    base = {k: (1 if events[k][0] >= 0 else -1) * math.floor(abs(events[k][0])) for k in events}
    frac = {k: abs(events[k][0]) - math.floor(abs(events[k][0])) for k in keys}
    outcomes = []
    for bits in range(1 << len(keys)):
        p, counts = 1.0, dict(base)
        more = {k: bits >> i & 1 for i, k in enumerate(keys)}
        for k in keys:
            share = frac[k]
            led = [j for j in follows.get(k, ()) if j in keys and events[j][0] > 0 and 0 < frac[j] < 1]
            if led and 0 < share < 1:
                q = 1.0 - math.prod(1.0 - frac[j] for j in led)      # a call with one of them
                both = max(0.0, share + q - 1.0)
                share = both / q if any(more[j] for j in led) else (share - both) / (1.0 - q)
            p *= share if more[k] else 1.0 - share
            counts[k] += (1 if events[k][0] >= 0 else -1) * more[k]
        if p > 1e-12:
            outcomes.append((sum(counts[k] * events[k][1] for k in events), bits, p, counts))
    outcomes.sort(key=lambda o: (o[0], o[1]))
    held = 0.0
    for _cost, _bits, p, counts in outcomes:
        held += p
        if held > 0.5 + 1e-9:
            return counts
    return outcomes[-1][3] if outcomes else dict(base)


IPI_KEYS = ("client_ipis", "server_ipis")
FOLLOWS = {AFTER_INTERRUPT_KEY: IPI_KEYS}


def _size_means(c):
    """{key: mean per call} of one size's other_path_counts c, for every row's key: the untraced runs'
    extra sleeps and interrupts per call (a difference within the same-path bounds counts 0, run.py
    IPI_SAME_PATH), and the wake-ups after those interrupts. Only the untraced runs' extra interrupts
    are followed by one: where the traced run took more (its tracer threads'), its step costs already hold
    whatever the wake-ups after them cost."""
    c = c or {}
    means = {key: float(c.get(key) or 0.0) for _d, key, _u, _l in OTHER_PATH_TERMS if key != AFTER_INTERRUPT_KEY}
    means[AFTER_INTERRUPT_KEY] = sum(max(0.0, means[k]) for k in IPI_KEYS)
    return means


def _other_path(sizes, params):
    """other_path_terms, and whether a row whose calls differ has no calibrated cost (the sleeps' and the
    interrupts' rows; an after-interrupt row without its calibration, older captures, is left out)."""
    counts = {int(k): v for k, v in (params.get("other_path") or {}).items() if v}
    means = {s: _size_means(counts.get(s)) for s in sizes}
    wake = params.get("wake_costs") or {}
    costed, rows, notes, uncosted = {}, [], [], False
    for device, key, unit, label in OTHER_PATH_TERMS:
        cost = (wake.get(device) or {}).get(unit)
        if cost is not None:
            costed[key] = costed.get(key, 0.0) + float(cost)
            rows.append((device, key, unit, label, float(cost)))
            continue
        # Named where a call would pay it alone (as before session 28); an after-interrupt row without its
        # calibration (older captures) is left out with a note, the interrupts' rows still counted.
        differ = {s: means[s][key] for s in sizes}
        if unit == "after_ipi_us":
            if any(differ.values()):
                notes.append(f"{device} {label}: {(wake.get(device) or {}).get('after_ipi_source') or 'not measured by this capture'} "
                             f"(rpc-wakecal's after_interrupt, session 28): not counted")
        elif any(median_call_count(m) for m in differ.values()):
            uncosted = True
            notes.append(f"{device} {label}: the untraced runs differ ({', '.join(f'{s}: {m:+.2f}' for s, m in differ.items() if m)} "
                         f"a call) but the capture has no wake-up calibration of its {unit[:-3]} cost: not counted")
    # The median call's counts: every costed row together (median_call_counts).
    per = {s: median_call_counts({k: (means[s][k], cost) for k, cost in costed.items()}, FOLLOWS) for s in sizes}
    terms = []
    for device, key, unit, label, cost in rows:
        if not any(per[s].get(key) for s in sizes):
            continue
        terms.append(Term(device, label, "", cost, 0.0, OTHER_PATH_RULE,
                          {s: {"count": per[s].get(key, 0), "bytes": 0.0, "extra_ip_packets": 0, "piggybacked_acks": 0,
                               "fragmented_datagrams": 0, "followed_fragments": 0, "mean_per_call": round(means[s][key], 3)} for s in sizes},
                          {"kind": "calibrated", "source": f"wake_costs.{device}.{unit} (rpc-wakecal)",
                           "count_source": (f"the untraced runs' {key} less the traced run's (other_path_counts)"
                                            if key != AFTER_INTERRUPT_KEY else
                                            "the next wake-up on this role's CPU after each of the untraced runs' "
                                            "extra interrupts (client_ipis + server_ipis, other_path_counts)"),
                           "count_rule": "median_call_counts: the middle call's outcome with every row together"}))
    return terms, notes, uncosted


def other_path_terms(sizes, params):
    """([Term], [note]): one term per role and kind whose count is not 0 at some size (params
    "other_path": {size: other_path_counts}, "wake_costs": {role: wakeup.wake_costs}), the counts
    those of the median call with every kind together (median_call_counts)."""
    terms, notes, _uncosted = _other_path(sizes, params)
    return terms, notes


def other_path_cost(counts, wake):
    """(us, wake-ups): what the other-path rows (other_path_terms) add for one size's counts
    (other_path_counts) at the calibrated costs (wake: {role: wakeup.wake_costs}), and how many
    wake-ups the median call pays in all; None where a wake-up it pays has no calibrated cost."""
    terms, _notes, uncosted = _other_path([0], {"other_path": {0: counts}, "wake_costs": wake})
    if uncosted:
        return None
    return sum(t.contribution(0) for t in terms), sum(abs(t.count(0)) for t in terms)


def _term_points(sid, rule, costs, sizes, fit_sizes, params):
    """({size: count, bytes, extra IP packets, piggybacked ACKs, fragmented datagrams, followed fragments},
    the fit's points [(size, n, bytes, extra, acks, fragmented, followed, per-RPC us)]) of a term counted
    by a rule (a measured count or bytes in the input wins over the rule's)."""
    per_size, pts = {}, []
    for s in sizes:
        if rule == NEAREST_RULE:
            seen = (costs.sizes[nearest_fitted(s, fit_sizes)].get(sid) or {}).get("path_count") or 0.0
            n, b = round(seen), 0.0
        else:
            n, b = occurrences(rule, s, params)
        m = costs.sizes[s].get(sid) or {}
        n = m.get("count", n)
        b = m.get("bytes", b)
        x = m.get("extra_ip_packets", extra_ip_packets(rule, s, params))
        k = m.get("piggybacked_acks", piggybacked_acks(sid, s, params) or acks_sent_before_wakeup(sid, s, costs, fit_sizes))
        f = m.get("fragmented_datagrams", fragmented_datagrams(rule, s, params))
        g = m.get("followed_fragments", followed_fragments(sid, rule, s, params))
        per_size[s] = {"count": n, "bytes": b, "extra_ip_packets": x, "piggybacked_acks": k, "fragmented_datagrams": f,
                       "followed_fragments": g}
        med = m.get("median_ns")
        if s in fit_sizes and n and med is not None:
            pts.append((s, n, b, x, k, f, g, med / 1000.0))   # the per-RPC total, us
    return per_size, pts


# A gap of the round-trip path that the path visits at some fitted sizes and not at others follows no
# packet or window count: over TCP the ACK the server's receive sends before it wakes the server (rtp.py
# SENT_BEFORE_WAKEUP) is on the path at 1392 and 1393 bytes (the fast path of tcp_rcv_established) and
# beside it from 4016 on (the slow path), which the kernel's memory accounting decides. Its count at any
# size is the one the path had at the nearest fitted size (in request bytes; the smaller of two as near):
# a held-out size takes its path's shape from its neighbour, never from its own traces.
NEAREST_RULE = "nearest_fitted_size"


def nearest_fitted(size, fit_sizes):
    return min(fit_sizes, key=lambda f: (abs(f - size), f))


def _on_path_at_some(observed):
    """Whether a gap's typical path counts ({fitted size: count}) put it on the path at some fitted sizes
    (at least half a visit per call) and not at others."""
    seen = [v for v in observed.values() if v is not None]
    return len(seen) == len(observed) and any(v >= 0.5 for v in seen) and any(v < 0.5 for v in seen)


# The rules a gap of the round-trip path (time between two marks that is no catalog step) may follow:
# once per call growing with its bytes, or once per window of the request. Over UDP the client's gap
# grows by windows, not bytes (1.2 us at 0-1393 bytes, one window; 2.7 at 4016-8032, two; 3.8 at
# 16064-24096, three: runs/run-20261125-143946), and a line through the bytes missed the null call by
# 0.6 us; a gap's path count (how many pieces it came in) is no count of occurrences to match.
GAP_RULE_CANDIDATES = (GAP_RULE, "request_windows")


def gap_rule(sid, costs, sizes, fit_sizes, params, weights=None):
    """The GAP_RULE_CANDIDATES rule whose fit (fit_unit) best predicts each fitted size from the others
    (its best form's leave-one-out error), the first among those within UNIT_FORM_MARGIN_PCT."""
    scores = {}
    for rule in GAP_RULE_CANDIDATES:
        _, pts = _term_points(sid, rule, costs, sizes, fit_sizes, params)
        info = fit_unit(pts, weights, slope_floor(params))[-1]
        if info.get("loo_rms"):
            scores[rule] = min(info["loo_rms"].values())
    if not scores:
        return GAP_RULE
    margin = UNIT_FORM_MARGIN_PCT if weights else 1e-9
    best = min(scores.values())
    return next(r for r in GAP_RULE_CANDIDATES if r in scores and scores[r] <= best + margin)


# The arithmetic a step on the round-trip path may follow: which of its occurrences lie on the path
# depends on the overlap (a server wakes once per window on the path, though once per fragment in all).
PATH_RULE_CANDIDATES = ("call", "call_request", "call_reply", "request_frags", "reply_frags", "server_sends",
                        "client_receives", "windows", "request_windows", "acks", "request_frags_multi",
                        "request_frags_but_last", "request_window_ends", "request_window_wakes")


# Rules that only the steps named may take: the wake-up that the first fragment of each window brings
# (request_window_wakes) is the server's (S2); other steps once per window on the path (the client's
# receives, the server's ACK sends) had taken it by a closer fit over some captures' noise alone.
STEP_ONLY_RULES = {"request_window_wakes": ("S2",)}


def path_rule(step, observed, totals, params, weights=None):
    """The occurrence rule whose counts best match how often the measured round-trip path visited the
    step at the fitted sizes (observed: {size: mean count}); among those that match equally, the one
    whose a + b*bytes fit explains the step's totals ({size: us}) best; then the catalog's rule. A step
    that the path visits at some fitted sizes and not at others, where no rule's count comes within
    half a visit of the path's at every fitted size, takes NEAREST_RULE."""
    def miss(rule):
        return round(sum((occurrences(rule, s, params)[0] - n) ** 2 for s, n in observed.items()), 6)

    def residual(rule):
        pts = [(s, *occurrences(rule, s, params), extra_ip_packets(rule, s, params), piggybacked_acks(step, s, params),
                fragmented_datagrams(rule, s, params), followed_fragments(step, rule, s, params), t)
               for s, t in totals.items()]
        pts = [p for p in pts if p[1]]
        if not pts:
            return float("inf")
        a, b, c, d, e, g, _ = fit_unit(pts, weights, slope_floor(params))
        w = weights or {}
        return round(sum(w.get(s, 1.0) * (t - n * (a + b * by) - x * c - k * d - f * e - h * g) ** 2
                         for s, n, by, x, k, f, h, t in pts), 9)

    own = STEP_RULES[step]
    if _on_path_at_some(observed) and not any(
            all(abs(occurrences(r, z, params)[0] - n) < 0.5 for z, n in observed.items()) for r in PATH_RULE_CANDIDATES):
        # On the path at some sizes and beside it at others, in a way no packet or window count follows:
        # over UDP the server's wait for the next fragment (S14) joins the path from 8032 bytes on and
        # not at 0-4016 (runs/run-20261125-193050). A count of one everywhere fitted a line through
        # zeros and 0.6 us and charged 0.1-0.3 us where the path never waits there; like a gap
        # (NEAREST_RULE), the step takes its count from the nearest fitted size.
        return NEAREST_RULE
    rules = [r for r in PATH_RULE_CANDIDATES if r not in STEP_ONLY_RULES or step in STEP_ONLY_RULES[r]]
    best = min(miss(r) for r in rules)
    tied = [r for r in rules if miss(r) == best]
    return min(tied, key=lambda r: (residual(r), r != own))


def with_rtp(costs, rtp, corrected=False):
    """Restrict the terms to the measured round-trip path (analysis/rtp.py's rtp_steps: {size: {segment:
    {"step", "count", "median_ns", "frac", "typical_ns", "typical_corrected_ns"}}}). Returns (costs, steps).

    With the typical call (rtp.json's per-segment means over the RPCs whose corrected RTT lies nearest
    its median, which add up to one RTT): every segment of the path is a term, the catalog's steps
    and the time between them (GAP_RULE), its per-RPC total the typical mean (probe-corrected with
    `corrected`), its counts from the protocol's arithmetic (for a step, the rule whose counts best
    match how often the path visited it at the fitted sizes: path_rule), so that a held-out size is
    predicted from the arithmetic alone. Each size's segments are scaled from the band's mean to the
    case's median RTT (band_to_median), which Measured is: where the calls fall in two modes near the
    median, the band nearest it is lopsided (runs/run-20261128-034709, UDP 24096: band mean 235.5 us
    corrected, median 229.4), and the model fitted the band's mean against Measured's median.
    Replayed on session 35's four fresh-clone runs, 55 -> 59 of 64 sizes; on four of session 34's,
    18 -> 20. Without it (an older rtp.json): the steps on the path in at least half the
    RPCs, each costing its median time on the path (at most the step's own median), counted as often
    as the path visited it."""
    costs = copy.deepcopy(costs)
    typical = all(v and all(r.get("typical_ns") is not None for r in v.values()) for v in rtp.values())
    if typical:
        key = "typical_corrected_ns" if corrected else "typical_ns"
        labels = []
        for v in rtp.values():
            for lab, r in v.items():
                if lab not in labels and (r.get("typical_count") or 0) > 0:
                    labels.append(lab)
        order = list(STEP_RULES)
        steps = [st for st in order if st in labels] + [lab for lab in labels if lab not in STEP_RULES]
        rules = {lab: GAP_RULE for lab in steps if lab not in STEP_RULES}
        for size, v in costs.sizes.items():
            path, scale = rtp.get(size, {}), traced_scale(costs, size)
            anchor = next((r.get("band_to_median") or {} for r in path.values()), {}).get(key, 1.0)
            for st in steps:
                seg = path.get(st) or {}
                v[st] = {"median_ns": (seg.get(key) or 0.0) * scale * anchor, "n": (v.get(st) or {}).get("n"),
                         "path_count": seg.get("typical_count") or 0.0}
        costs.params = dict(costs.params, term_rules=rules, path_rules=True)
        costs.source += " + the typical call's round-trip path (rtp.json" + (", probe-corrected)" if corrected else ")")
        return costs, steps
    on = {st for v in rtp.values() for st, r in v.items() if st in STEP_RULES and r.get("frac", 1) >= 0.5}
    steps = [st for st in STEP_RULES if st in on]
    for size, v in costs.sizes.items():
        path = {st: r for st, r in rtp.get(size, {}).items() if r.get("frac", 1) >= 0.5}
        for st in steps:
            if st in path:
                # The time on the path, but never more than the step's own (e.g. probe-corrected) median.
                own = (v.get(st) or {}).get("median_ns")
                on_path = path[st]["median_ns"] * traced_scale(costs, size)
                med = on_path if own is None else min(own, on_path)
                v[st] = dict(v.get(st) or {}, median_ns=med, count=path[st]["count"])
            else:
                v[st] = dict(v.get(st) or {}, count=0)
    costs.source += " + measured round-trip path (rtp.json)"
    return costs, steps


# The forms a unit cost may take, simplest first, as columns of (occurrences, bytes in all, extra IP
# packets in all). A constant only where the bytes per occurrence do not vary: chosen by leave one
# out elsewhere, it dropped small real per-byte slopes (TCP's steps at 16 and 24 KB, s6 runs).
UNIT_FORMS = (("constant", (0,)), ("linear", (0, 1)), ("per packet", (0, 2)), ("linear and per packet", (0, 1, 2)))
# Columns 3, piggybacked ACKs in all (piggybacked_acks), 4, fragmented datagrams in all
# (fragmented_datagrams), and 5, followed fragments in all (followed_fragments), are no form to choose: the protocol says which sizes carry the work, so every
# form of a term whose fitted sizes have it at some sizes and not at others gets it, and a cost below
# zero (noise) drops it (_without_negative). Why the datagrams in every form and not only beside the
# extra packets: re-fitted over the 43 runs of sessions 14-17 (`rpcscope goals --refit`), the model met
# 489 of 688 sizes without the column, 506 with it in every form; with it only in the per-packet forms
# (over the last 35 of those runs) 414 against 442 without, UDP 1392 at +4.3 %. analysis/MODEL.md.
ACK_COLUMN = 3
FRAG_COLUMN = 4
FOLLOWED_COLUMN = 5
OPTIONAL_COLUMNS = (ACK_COLUMN, FRAG_COLUMN, FOLLOWED_COLUMN)
# Where the runs took turns (slope_floor: none) and fragmented datagrams are a column (some fitted
# sizes have them and some not), each form also without that column, after all the others: kept only
# where it predicts the left-out sizes better than every form with the column by UNIT_FORM_MARGIN_PCT.
# The column went into every form because the captures of sessions 14-17 met fewer sizes without it
# (FRAG_COLUMN); with the sizes side by side, leave one out can tell a step that pays nothing per
# fragmented datagram, and a wait counted once per window of the request was kept from falling with the
# window's bytes by the column (_slopes_ok): UDP's C17 and S3 (select returns) took 1.39 and 1.61 us a
# window at 0 bytes, 0.77 and 0.80 at 24096 (8032 bytes a window), and fitted flat they put the model
# 0.5 us short at 0 and 2.3 us over at 16064 (runs/run-20261128-042439). Replayed on session 35's seven
# turn-taking runs, 98 -> 107 of 112 sizes met; refitted over session 34's seven runs without turns
# the forms cost 3 sizes (32 -> 29 of 112), hence only where the runs took turns (analysis/MODEL.md).
WITHOUT_DATAGRAMS = " without fragmented datagrams"
# A form with more parameters is kept only if it predicts a left-out size better by this much (% of
# that size's RTT): with five or six sizes to fit, an extra parameter can otherwise follow the noise.
UNIT_FORM_MARGIN_PCT = 0.02
# A form whose fit over all the sizes costs less per byte or per extra IP packet than this (us per
# byte, us per packet) is not a candidate: more bytes cannot take less work, so a falling slope is the
# host's speed drifting between the sizes' captures (a null call's stub entry "getting cheaper" at
# 24 KB). Seen on a noisy host: nearly every TCP step fitted about -0.016 ns/B, together -20 us at 24 KB.
UNIT_SLOPE_FLOOR = -1e-9


def slope_floor(params):
    """UNIT_SLOPE_FLOOR, or none where the capture's runs took turns (params["falling_slopes"]; capture
    --turns, session 35). There the sizes ran side by side and share the host's moments, so a slope
    that falls is no drift between captures but the step's own: a wait that overlaps more of the other
    side's work as the bytes grow. runs/run-20261128-031737, TCP, 0 to 24096 bytes, in every round:
    C17 1.13 -> 0.52 us, S3 0.96 -> 0.42, S9'' 0.53 -> 0.20, C8'' 0.63 -> 0.38; held flat, they made
    the model 0.8 us short at 0 and 0.9 us over at 24096 (the tilt of sessions 32-33)."""
    return -math.inf if params.get("falling_slopes") else UNIT_SLOPE_FLOOR


def fit_unit(pts, weights=None, floor=UNIT_SLOPE_FLOOR):
    """A term's unit cost from pts [(size, n occurrences, mean bytes, extra IP packets, piggybacked
    ACKs, fragmented datagrams, followed fragments, per-RPC total us)]: (a, b, c, d, e, f, info) with
    total = n*a + n*bytes*b + extra*c + acks*d + fragmented*e + followed*f, least squares with each size weighted by `weights` ({size: w}, default 1; the fit minimises the
    error of the step's share of the RTT).

    With three sizes or more the form (UNIT_FORMS: linear in bytes, a cost per extra IP packet
    instead, or both; a constant where the bytes per occurrence do not vary) is the one that best
    predicts each size from the others (leave one out), the simplest among those within
    UNIT_FORM_MARGIN_PCT; a form that some left-out fit cannot determine is not a candidate, nor one
    whose fit over all the sizes has a cost per byte or per packet below `floor` (UNIT_SLOPE_FLOOR, or
    none: slope_floor; with none, each form WITHOUT_DATAGRAMS too).
    With fewer sizes: linear in bytes (unless its slope falls), or a constant where the bytes do not
    vary. Piggybacked ACKs, fragmented datagrams and followed fragments (OPTIONAL_COLUMNS), when some
    fitted sizes have them and some not, are in every form; a left-out size whose such work no other size shares, or that
    alone tells the column from the others, is then not predicted, and a cost below zero (noise) drops
    the column. info: sizes, points, kind (the form), falling (the forms refused for a negative slope),
    rms_residual_us, loo_rms (% of the RTT when weighted, else us) per candidate form, piggybacked_acks,
    fragmented_datagrams and followed_fragments (whether each column was fitted)."""
    info = {"sizes": [p[0] for p in pts], "points": len(pts)}
    if not pts:
        info["kind"] = "none"
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, info
    rows = [((weights or {}).get(s, 1.0), (n, n * b, x, k, f, g), y) for s, n, b, x, k, f, g, y in pts]
    extra = tuple(c for c in OPTIONAL_COLUMNS if any(x[c] for _, x, _ in rows) and not all(x[c] for _, x, _ in rows))
    forms = tuple((name, _without_negative(rows, cols, extra)) for name, cols in UNIT_FORMS)
    if floor < UNIT_SLOPE_FLOOR and FRAG_COLUMN in extra:
        forms += tuple((name + WITHOUT_DATAGRAMS, _without_negative(rows, cols, tuple(c for c in extra if c != FRAG_COLUMN)))
                       for name, cols in UNIT_FORMS)
    whole = {name: _wls(rows, cols) for name, cols in forms}      # each form fitted over every size
    info["falling"] = [name for name, cols in forms
                       if whole[name] is not None and not _slopes_ok(whole[name], cols, floor)]
    linear_ok = {name for name, cols in forms if name.startswith("linear") and _slopes_ok(whole[name], cols, floor)}
    loo = {}
    for name, cols in (forms if len(pts) >= 3 else ()):
        if name.startswith("constant") and name.replace("constant", "linear", 1) in linear_ok \
                or name in info["falling"]:
            continue
        rms = _leave_one_out(rows, cols)
        if rms is not None:
            loo[name] = rms * (100.0 if weights else 1.0)
    if not loo:      # too few sizes to leave one out, or no form survives it
        name = "linear" if "linear" in linear_ok and len({p[2] for p in pts}) > 1 else "constant"
    else:
        margin = UNIT_FORM_MARGIN_PCT if weights else 1e-9
        best = min(loo.values())
        name = next(n for n, _ in forms if n in loo and loo[n] <= best + margin)
        info["loo_rms"] = {k: round(v, 4) for k, v in loo.items()}
        info["loo_unit"] = "% of RTT" if weights else "us"
    cols = dict(forms)[name]
    th = whole[name]
    coef = [0.0] * 6
    for c, v in zip(cols, th or ()):
        coef[c] = v
    info["kind"] = name
    info["piggybacked_acks"] = ACK_COLUMN in cols
    info["fragmented_datagrams"] = FRAG_COLUMN in cols
    info["followed_fragments"] = FOLLOWED_COLUMN in cols
    res = [y - sum(k * v for k, v in zip(coef, x)) for _, x, y in rows]
    info["rms_residual_us"] = math.sqrt(sum(r * r for r in res) / len(res))
    return (*coef, info)


def _without_negative(rows, cols, optional):
    """A form's columns cols plus the optional ones, less each optional column whose cost comes out
    below zero (or cannot be fitted) over every row: noise, not work."""
    cols = cols + optional
    for c in optional:
        th = _wls(rows, cols)
        if th is None or th[cols.index(c)] < 0.0:
            cols = tuple(k for k in cols if k != c)
    return cols


def _leave_one_out(rows, cols):
    """The weighted rms error of predicting each row from the others with the columns cols, or None
    when some fit cannot be made. A row with piggybacked ACKs (or fragmented datagrams) that no other row
    has, or that alone tells that column from the others, is fitted without that column and not
    predicted (that cost comes from it alone)."""
    errs = []
    for i, (w, x, y) in enumerate(rows):
        rest = rows[:i] + rows[i + 1:]
        alone = [c for c in OPTIONAL_COLUMNS if c in cols and not any(r[1][c] for r in rest)]
        use = tuple(c for c in cols if c not in alone)
        th = _wls(rest, use)
        for c in [c for c in OPTIONAL_COLUMNS if c in use and th is None]:
            # Only the left-out size tells this column from the others (UDP 1392 is the only fitted size
            # with a fragmented datagram of two IP packets: without it, fragmented datagrams are half the
            # extra packets): fitted without it, and not predicted if it has that work.
            alone.append(c)
            use = tuple(k for k in use if k != c)
            th = _wls(rest, use)
        if th is None:
            return None
        if any(x[c] for c in alone):
            continue
        errs.append(w * (y - sum(t * x[c] for t, c in zip(th, use))) ** 2)
    return math.sqrt(sum(errs) / len(errs)) if errs else None


def _slopes_ok(coef, cols, floor=UNIT_SLOPE_FLOOR):
    """Whether a fit (coefficients for cols, None if it could not be made) exists and costs no less per
    byte or per extra IP packet (columns 1 and 2) than floor. A floor below UNIT_SLOPE_FLOOR (slope_floor)
    holds only for a cost per byte beside no column of packets or fragmented datagrams (2, FRAG_COLUMN):
    those nearly follow the bytes, and let fall they trade off against them (UDP C15 in a replay of
    runs/run-20261128-031737: -196 us an extra IP packet, +92 a fragmented datagram, and the held-out
    6000 off by -57 %)."""
    if 2 in cols or FRAG_COLUMN in cols:
        floor = max(floor, UNIT_SLOPE_FLOOR)
    return coef is not None and all(v >= floor for v, c in zip(coef, cols) if c in (1, 2))


def _wls(rows, cols):
    """Weighted least squares over rows [(w, x, y)] with the columns cols of x: the coefficients, or
    None when the columns cannot be told apart (one is zero, or a combination of the others). The
    columns are scaled to unit weighted rms first (counts are ones, bytes tens of thousands)."""
    sw = sum(w for w, _, _ in rows)
    if not sw:
        return None
    scale = [math.sqrt(sum(w * x[c] ** 2 for w, x, _ in rows) / sw) for c in cols]
    if min(scale) == 0.0:
        return None
    k = len(cols)
    m = [[0.0] * (k + 1) for _ in range(k)]
    for w, x, y in rows:
        v = [x[c] / sc for c, sc in zip(cols, scale)]
        for i in range(k):
            m[i][k] += w * v[i] * y / sw
            for j in range(k):
                m[i][j] += w * v[i] * v[j] / sw
    for c in range(k):                       # Gauss-Jordan elimination with partial pivoting
        p = max(range(c, k), key=lambda i: abs(m[i][c]))
        if abs(m[p][c]) <= 1e-9:
            return None
        m[c], m[p] = m[p], m[c]
        for i in range(k):
            if i != c:
                f = m[i][c] / m[c][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[c])]
    return [m[i][k] / m[i][i] / scale[i] for i in range(k)]


# ------------------------------------------------------------------ input


def load_costs(path, corrected=False, proc=None, transport=None):
    """Read the fit's input: a step-costs file (format rpcscope-step-costs/1, analysis/MODEL.md), or
    the analyze command's steps.json (a run directory, its analysis/ folder, or the file)."""
    p = Path(path)
    if p.is_dir():
        for cand in (p / "analysis" / "steps.json", p / "steps.json"):
            if cand.exists():
                p = cand
                break
        else:
            raise ValueError(f"{path}: no analysis/steps.json (run `rpcscope analyze {path}` first)")
    try:
        d = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: {e}") from None
    if d.get("format") == COSTS_FORMAT:
        sizes = {int(s): v.get("steps", {}) for s, v in d["sizes"].items()}
        meas = {int(s): v.get("measured_rtt_ns") for s, v in d["sizes"].items()}
        params = {k: d[k] for k in ("mtu", "max_pdu", "reply", "request_overhead", "link_rate_bps") if k in d}
        return Costs(sizes, meas, params, str(p))
    if isinstance(d.get("steps"), list) and isinstance(d.get("rtt"), list):
        return _from_analyze(d, p, corrected, proc, transport)
    raise ValueError(f"{p}: neither a {COSTS_FORMAT} file nor the analyze command's steps.json")


def _from_analyze(d, p, corrected, proc, transport):
    rows = [r for r in d["steps"] if (proc is None or r.get("proc") == proc)
            and (transport is None or r.get("transport") == transport)]
    cases = {}
    for r in rows:
        cases.setdefault((r.get("transport"), r.get("proc")), set()).add(r["size"])
    if len(cases) > 1:
        raise ValueError(f"{p}: several transport/proc combinations {sorted(cases)}: choose with --proc/--transport")
    if not cases:
        raise ValueError(f"{p}: no step rows" + (" for that --proc/--transport" if proc or transport else ""))
    (tr, pr), = cases
    key = "corrected_median_us" if corrected else "median_us"
    sizes = {}
    for r in rows:
        if r.get("status") != "measured" or r.get(key) is None:
            continue
        e = {"median_ns": r[key] * 1000.0, "n": r.get("n")}
        if r.get("occurrences_median") is not None and r["step"] in STEP_RULES:
            e["count_observed"] = r["occurrences_median"]
        sizes.setdefault(int(r["size"]), {})[r["step"]] = e
    meas, noise, level = {}, {}, {}
    for r in d["rtt"]:
        if r.get("proc") == pr and r.get("transport") == tr and r.get("untraced_p50_us") is not None:
            meas[int(r["size"])] = r["untraced_p50_us"] * 1000.0
            if r.get("traced_noise_pct") is not None:
                noise[int(r["size"])] = r["traced_noise_pct"]
            lv = level_figures(r)
            if lv:
                level[int(r["size"])] = lv
                meas[int(r["size"])] = lv["untraced_level_p50_us"] * 1000.0
    for size, lv in level.items():
        for e in sizes.get(size, {}).values():
            e["median_ns"] *= lv["traced_scale"]
    for s in sizes:
        meas.setdefault(s, None)
    reply = "same" if pr in ("echo",) else 0
    params = {"reply": reply, "transport": tr, "proc": pr}
    other = {int(r["size"]): r["other_path"] for r in d["rtt"]
             if r.get("proc") == pr and r.get("transport") == tr and r.get("other_path")}
    if other and d.get("wake_costs") is not None:
        params["other_path"] = other
        params["wake_costs"] = d["wake_costs"]
    if noise:
        params["size_noise_pct"] = noise
    if level:
        params["level"] = level
    if any(r.get("took_turns") for r in d["rtt"] if r.get("proc") == pr and r.get("transport") == tr):
        params["falling_slopes"] = True      # the sizes ran side by side (capture --turns): slope_floor
    return Costs(sizes, meas, params, str(p))


def level_figures(rtt_row):
    """A size's figures for its speed level (steps.json rtt row; analysis/run.py level_p50_ns), or None
    where the capture ran fewer than three rounds in that level: Measured is the median of the level's
    untraced rounds' p50s, and the traced step costs, which come from the kept round's traces, are
    scaled by the level's median traced p50 over the kept traced run's p50 (traced_scale), so that
    Measured and the step costs stand for the same rounds. Why both: one round's p50s move together
    (a round's calls are uniformly slower or faster), so a Measured from the level beside step costs
    from one round would add that round's noise, not remove it. Re-fitted over the 51 captures of
    sessions 14-18 in runs/ (`rpcscope goals --refit`): goals met at 672 of 816 sizes against 659 with
    the kept round's figures, every size met in 10 runs against 6; with Measured alone from the level,
    662 (analysis/MODEL.md, session 19)."""
    u, t, kept = (rtt_row.get(k) for k in ("untraced_level_p50_us", "traced_level_p50_us", "traced_rtt_p50_client_us"))
    if not (u and t and kept):
        return None
    return {"rounds": rtt_row.get("level_rounds"), "untraced_level_p50_us": u,
            "untraced_kept_round_p50_us": rtt_row.get("untraced_p50_us"), "traced_level_p50_us": t,
            "traced_kept_round_p50_us": kept, "traced_scale": t / kept}


def traced_scale(costs, size):
    """The factor a size's traced step costs are scaled by (level_figures), 1 without one."""
    return ((costs.params.get("level") or {}).get(size) or {}).get("traced_scale", 1.0)


# ------------------------------------------------------------------ the DCE paper's Table 2


def shared_dir():
    env = os.environ.get("RPCSCOPE_SHARED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared"


def _csv_rows(path):
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.reader(lines))


def paper_dce_summary(shared=None):
    """The bottom rows of Table 2: [{size, calculated_us, measured_us, percent_error}] as printed."""
    path = Path(shared or shared_dir()) / "seeds" / "tables" / "dce_table2_summary.csv"
    rows = _csv_rows(path)
    hdr = rows[0]
    return [dict(zip(hdr, (int(r[0]),) + tuple(float(x) for x in r[1:]))) for r in rows[1:]]


def paper_dce(shared=None):
    """The DCE study's Table 2 (columns NULL, 1392, 4016) as a model: each row a term with its unit
    cost (constant: the paper gives one value per size) and its count per size."""
    shared = Path(shared or shared_dir())
    path = shared / "seeds" / "tables" / "dce_table2_null_1392_4016.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (set RPCSCOPE_SHARED to the folder holding seeds/)")
    sizes = [0, 1392, 4016]
    terms = []
    for r in _csv_rows(path):
        device, step, term, unit = r[0], r[1], r[2], float(r[3])
        counts = [int(x) for x in r[4:7]]
        m = re.search(r"\((\d+)\)", term)
        nbytes = int(m.group(1)) if m else 0
        terms.append(Term(device, step, term, unit, 0.0, None,
                          {s: {"count": c, "bytes": nbytes} for s, c in zip(sizes, counts)},
                          {"kind": "paper"}))
    summ = {r["request_bytes"]: r for r in paper_dce_summary(shared)}
    model = Model(terms, sizes, {s: summ[s]["measured_us"] for s in sizes if s in summ}, [],
                  {"mtu": 1500, "max_pdu": 4096, "reply": 0}, "DCE study (004), Table 2", 10e6,
                  ["unit costs and counts reconstructed from the damaged scan; their sums are 12 us above "
                   "the paper's printed Summation row in all three columns (see the CSV's header)"],
                  {"paper_calculated_us": {s: summ[s]["calculated_us"] for s in sizes if s in summ},
                   "paper_percent_error": {s: summ[s]["percent_error"] for s in sizes if s in summ}})
    return model
