"""One timeline per case: every host's timestamps on the reference host's (the client's) clock.

A case captured on two kernels has two clocks. Each trace's clock class (CTF metadata) carries the
offset of its clock from the epoch (LTTng: realtime - monotonic when the session started; perf and
ftrace: 0 or a copy of LTTng's), and its raw values count that host's CLOCK_MONOTONIC (traceread's
``ts``). The case's timeline is built in two steps:

1. Metadata: one epoch offset per host, the clock offset of its first trace that has one (its user
   trace, else its kernel trace); a host's traces share its CLOCK_MONOTONIC, so all of them take the
   host's offset (LTTng's user and kernel sessions measure it a few microseconds apart; perf's
   converted CTF has none). Each host's raw values plus (its epoch offset - the reference host's)
   are on one epoch-aligned timeline, as far as the hosts' realtime clocks agree.
2. Packets: the convex hull over the RPC's own messages (clocksync.py; the client's and the server's
   user send and receive marks, both directions) fits the server's epoch-aligned clock to the
   client's: ``t_server = slope * t_client + b``. Its inverse maps the server's events onto the
   client's clock, with an accuracy bound.

    tl = case.timeline()               # built from the case's user marks (run.Case)
    tl.map_for("rpcs-server").forward(ts)  # raw server ts (int64 ns) -> the client's clock
    tl.as_dict()                       # what steps.json records per case (clock_sync)

The fit is applied only where the hosts have their own kernels (a trace per host, a testbed whose
kernel is not shared). Where it cannot be made (messages in one direction only, crossing hulls) the
server keeps the metadata alignment and the case is flagged; where its bound exceeds the median
one-way delay of the messages, the order of one host's steps against the other's is not established
by the clocks, and the case is flagged too. Flags are messages in as_dict()["flag"], never dropped.
"""
from dataclasses import dataclass, field

import numpy as np

from .clocksync import USER_PACKET_MARKS, ClockFit, estimate, match_user_packets
from .traceread import Events, merge

REFERENCE_ROLE = "client"
_MARK_COLUMNS = ["kind", "name", "tid", "pid", "call_id", "frag"]


# Two kernels number their CPUs from 0 each: the merged view adds CPU_STRIDE times the host's rank
# (the client 0) to a host's CPU numbers, and Run.hosts' cpus alike (run.py), so per-CPU lookups
# (softirqs, probe costs) never mix the hosts.
CPU_STRIDE = 1000


@dataclass(frozen=True)
class ClockMap:
    """A host's raw timestamps (int64 ns) onto the reference clock: t = raw + shift_ns, then (fitted)
    x0 + (t - y0) / slope. Integer in, integer out: epoch-sized values never pass through a float.
    cpu_base: added to the host's CPU numbers (CPU_STRIDE)."""
    shift_ns: int = 0
    fitted: bool = False
    x0: int = 0
    y0: int = 0
    slope: float = 1.0
    cpu_base: int = 0

    @property
    def identity(self):
        return not self.shift_ns and not self.fitted and not self.cpu_base

    def cpus(self, cpu):
        cpu = np.asarray(cpu)
        if not self.cpu_base:
            return cpu
        return np.where(cpu >= 0, cpu + self.cpu_base, cpu).astype(cpu.dtype)

    def forward(self, ts):
        t = np.asarray(ts, dtype=np.int64)
        if self.shift_ns:
            t = t + np.int64(self.shift_ns)
        if not self.fitted:
            return t
        return np.int64(self.x0) + np.rint((t - np.int64(self.y0)) / self.slope).astype(np.int64)

    def backward(self, t_ref):
        """The raw value a reference time comes from (a scalar; within a nanosecond)."""
        t = int(t_ref)
        if self.fitted:
            t = self.y0 + int(round((t - self.x0) * self.slope))
        return t - self.shift_ns


IDENTITY = ClockMap()


@dataclass
class HostClock:
    host: str | None
    role: str | None
    traces: list = field(default_factory=list)      # [{"trace", "clock", "offset_ns"}]
    epoch_offset_ns: int | None = None
    map: ClockMap = IDENTITY

    def as_dict(self):
        return {"host": self.host, "role": self.role, "traces": self.traces, "epoch_offset_ns": self.epoch_offset_ns,
                "shift_ns": self.map.shift_ns, "fitted": self.map.fitted, "cpu_base": self.map.cpu_base}


@dataclass
class CaseTimeline:
    hosts: dict                         # {host or None: HostClock}
    fit: ClockFit
    pairs: dict                         # {"a_to_b": n, "b_to_a": n}
    separate_clocks: bool               # a trace per host and kernels not shared
    applied: bool                       # the fit maps the server's events
    metadata_shift_ns: int              # server's epoch offset - client's (0: one clock, or unknown)
    one_way: dict                       # per direction: min, median, negative count (ns, mapped)
    flag: str = ""

    def map_for(self, host):
        h = self.hosts.get(host)
        return h.map if h else IDENTITY

    def as_dict(self):
        f = self.fit
        d = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in f.as_dict().items()}
        ok = f.quality != "failed"
        # offset_ns: server raw - client raw (CLOCK_MONOTONIC of each) at the reference time, what an
        # exchange of monotonic timestamps measures; aligned_offset_ns: what is left once the CTF
        # clock offsets are honoured (the hull's own estimate); metadata_shift_ns: their difference.
        d["aligned_offset_ns"] = d["offset_ns"] if ok else None
        d["offset_ns"] = d["offset_ns"] - self.metadata_shift_ns if ok else None
        d.update(pairs=self.pairs, metadata_shift_ns=self.metadata_shift_ns, separate_clocks=self.separate_clocks,
                 applied=self.applied, one_way=self.one_way, flag=self.flag,
                 hosts=[h.as_dict() for h in self.hosts.values()])
        return d


def _user_marks(stored, names):
    """User events of the given names from one StoredTrace, read a chunk at a time (memory holds the
    marks, not the trace)."""
    parts = []
    for ch in stored.chunks(columns=_MARK_COLUMNS):
        parts.append(ch.select(np.isin(ch.name, [ch.name_id(n) for n in names])))
    parts = parts or [stored.span(columns=_MARK_COLUMNS)]
    return Events({k: np.concatenate([np.asarray(x.cols[k]) for x in parts]) for k in parts[0].cols},
                  stored.names, stored.sources, stored.problems, stored.threads)


def _epoch_offset(stores):
    """The first clock offset (ns) the traces' metadata gives, and each trace's clock."""
    traces, first = [], None
    for label, st in stores:
        clock = (st.sources[0] if st.sources else {}).get("clock") or {}
        off = clock.get("offset_ns")
        traces.append({"trace": label, "clock": clock.get("name"), "offset_ns": off})
        if first is None and off:
            first = int(off)
    return first, traces


def build(case, raw_stores, roles, shared_kernel):
    """The case's timeline. raw_stores: {"ust": [(host, label, StoredTrace)], "kernel": [...]} as read,
    unmapped; roles(events) -> {tid: role}; shared_kernel: the testbed's hosts run on one kernel."""
    hosts = {}
    by_host = {}
    for kind in ("ust", "kernel"):
        for host, label, st in raw_stores.get(kind, []):
            by_host.setdefault(host, []).append((label, st))
    for host, stores in by_host.items():
        off, traces = _epoch_offset(stores)
        role = (case.run.hosts.get(host) or {}).get("role") if host else None
        hosts[host] = HostClock(host, role, traces, off)
    separate = (not shared_kernel and len(hosts) > 1 and None not in hosts
                and {h.role for h in hosts.values()} >= {"client", "server"})
    ref = next((h for h in hosts.values() if h.role == REFERENCE_ROLE), None)
    names = {m for pair in USER_PACKET_MARKS.values() for m in pair}
    side = {"client": [], "server": []}
    for host, label, st in raw_stores.get("ust", []):
        ev = _user_marks(st, names)
        h = hosts[host]
        shift = _shift(h, ref) if separate else 0
        if shift:
            ev = Events(dict(ev.cols, ts=np.asarray(ev.ts, np.int64) + np.int64(shift)), ev.names, ev.sources,
                        ev.problems, ev.threads)
        rl = roles(ev) if len(ev) else {}
        for r in side:
            want = [t for t, x in rl.items() if x == r]
            if separate and h.role != r:
                continue
            side[r].append(ev.select(np.isin(ev.tid, want)))
    sel = {r: (v[0] if len(v) == 1 else merge(v)) if v else None for r, v in side.items()}
    if sel["client"] is None or sel["server"] is None:
        pairs = {"a_to_b": (np.zeros(0, np.int64),) * 2, "b_to_a": (np.zeros(0, np.int64),) * 2}
    else:
        pairs = match_user_packets(sel["client"], sel["server"])
    fit = estimate(pairs["a_to_b"], pairs["b_to_a"])
    metadata_shift = 0
    cpu_base = getattr(case.run, "cpu_base", {}) or {}
    for h in hosts.values():
        h.map = ClockMap(shift_ns=_shift(h, ref) if separate else 0, cpu_base=cpu_base.get(h.host, 0))
        if h.role == "server":
            metadata_shift = h.map.shift_ns
    applied = separate and fit.quality != "failed"
    if applied:
        for h in hosts.values():
            if h.role == "server":
                h.map = fit_map(fit, h.map.shift_ns, h.map.cpu_base)
    one_way = _one_way(pairs, fit if applied or not separate else None)
    tl = CaseTimeline(hosts, fit, {k: int(len(v[0])) for k, v in pairs.items()}, separate, applied,
                      metadata_shift, one_way)
    tl.flag = _flag(tl)
    return tl


def fit_map(fit, shift_ns=0, cpu_base=0):
    """The ClockMap of a fit (t_B = slope * t_A + b, on B's clock shifted by shift_ns) from B to A."""
    x0 = int(round(fit.x0))
    y0 = int(round(fit.y0 + (x0 - fit.x0) * fit.slope))
    return ClockMap(shift_ns=shift_ns, fitted=True, x0=x0, y0=y0, slope=fit.slope, cpu_base=cpu_base)


def _shift(h, ref):
    if ref is None or h is ref or h.epoch_offset_ns is None or ref.epoch_offset_ns is None:
        return 0
    return int(h.epoch_offset_ns - ref.epoch_offset_ns)


def _one_way(pairs, fit):
    """Per direction, the messages' one-way delays on the client's clock (the server's marks mapped
    by the fit; None: not mapped, as on one kernel): min, median and how many are negative."""
    out = {}
    for d, (s, r) in pairs.items():
        if not len(s):
            out[d] = None
            continue
        s, r = np.asarray(s, np.int64), np.asarray(r, np.int64)
        if fit is not None and fit.quality != "failed":
            m = fit_map(fit)
            if d == "a_to_b":
                r = m.forward(r)
            else:
                s = m.forward(s)
        dl = r - s
        out[d] = {"min_ns": int(dl.min()), "median_ns": float(np.median(dl)), "negative": int((dl < 0).sum())}
    return out


def _flag(tl):
    """Why the case's cross-host order cannot be trusted, or ""."""
    f = tl.fit
    if not tl.separate_clocks:
        return ""
    if f.quality == "failed":
        return (f"the server's clock could not be fitted to the client's ({f.reason}): its events keep the "
                f"traces' clock offsets (CTF metadata) only, so the order of its steps against the client's "
                f"is unknown")
    med = [v["median_ns"] for v in tl.one_way.values() if v]
    if med and f.accuracy_ns > min(med):
        return (f"the clock bound ({f.accuracy_ns / 1000:.1f} us) exceeds the median one-way delay of the "
                f"messages ({min(med) / 1000:.1f} us): the order of the server's steps against the client's "
                f"is not established within it")
    return ""


def independent_check(clock_check, clock_sync):
    """The capture's timestamp exchange over SSH (collectors/clockcheck.py; the manifest's
    cases[].clock_check, one before the case and one after) against the hull's estimate: the server's
    offset from the client (raw CLOCK_MONOTONIC) by the exchange, on the line through the two at the
    estimate's reference time, and whether the two agree within the sum of their bounds. None where
    the capture took none; {"error": ...} where it could not be made."""
    if not clock_check:
        return None
    roles = {h["host"]: h["role"] for h in clock_sync.get("hosts") or [] if h.get("host")}
    points, errors = [], []
    for when in ("before", "after"):
        c = clock_check.get(when) or {}
        if c.get("error"):
            errors.append(f"{when}: {c['error']}")
            continue
        by_role = {roles.get(h): v for h, v in (c.get("hosts") or {}).items()}
        cl, sv = by_role.get("client"), by_role.get("server")
        if cl and sv:
            points.append((sv["at_ns"] + cl["offset_ns"], sv["offset_ns"] - cl["offset_ns"],
                           (sv["rtt_ns"] + cl["rtt_ns"]) / 2))
    method = (clock_check.get("before") or clock_check.get("after") or {}).get("method")
    if not points:
        return {"method": method, "error": "; ".join(errors) or "the exchange has no client and server"}
    if clock_sync.get("offset_ns") is None:
        return {"method": method, "offset_ns": points[0][1], "bound_ns": points[0][2], "agrees": None,
                "note": "no estimate to compare with"}
    x = clock_sync["reference_ns"]
    if len(points) == 2 and points[1][0] != points[0][0]:
        (t0, o0, b0), (t1, o1, b1) = points
        off = o0 + (o1 - o0) * (x - t0) / (t1 - t0)
        bound = max(b0, b1)
    else:
        _, off, bound = points[0]
    diff = clock_sync["offset_ns"] - off
    return {"method": method, "exchanges": len(points), "offset_ns": off, "bound_ns": bound,
            "difference_ns": diff, "agrees": bool(abs(diff) <= clock_sync["accuracy_ns"] + bound)}
