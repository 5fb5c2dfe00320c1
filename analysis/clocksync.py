"""Offset and drift of one host's clock relative to another's, from one-way packets.

The convex-hull method Trace Compass uses (Duda et al.; Jabbarifar, Dagenais &
Shameli-Sendi, "Streaming mode incremental clock synchronization"): model host
B's clock as a linear function of host A's, ``t_B = a * t_A + b``.  A packet
sent by A at ``s_A`` and received by B at ``r_B`` gives ``r_B > a*s_A + b``
(it cannot arrive before it left); a packet sent by B at ``s_B`` and received
by A at ``r_A`` gives ``s_B < a*r_A + b``.  In the plane (A time, B time) the
first set of points lies above every admissible line and the second below: the
admissible (a, b) form a convex set bounded by the lower hull of the first and
the upper hull of the second.  Its extreme lines (least and greatest slope)
bound the answer; the estimate is their bisector, and the accuracy bound is how
far any admissible line strays from the estimate over the time the packets cover.

    from rpcscope.analysis.clocksync import estimate
    r = estimate(a_to_b=(send_A, recv_B), b_to_a=(send_B, recv_A))
    r.quality        # "accurate" | "approximate" | "failed"
    r.drift_ppm, r.offset_ns, r.accuracy_ns, r.to_reference(t_B)

Quality: "accurate" when both directions constrain the line and the admissible
set is small (accuracy within ``accurate_ns``); "approximate" when it exists but
is wider; "failed" (with a reason) when there are no packets, packets in one
direction only, or no line fits (the hulls cross: the clocks are not linear
over the interval, or packets were mismatched).
"""
from dataclasses import dataclass, field

import numpy as np

from rpcscope.tracepoints import side_step, step


@dataclass
class ClockFit:
    quality: str                    # accurate | approximate | failed
    reason: str = ""
    slope: float = 1.0              # a in t_B = a * t_A + b
    x0: float = 0.0                 # reference A time (ns): the middle of the packets' span
    y0: float = 0.0                 # B time at x0 by the estimate (ns)
    slope_min: float = float("nan")
    slope_max: float = float("nan")
    accuracy_ns: float = float("nan")   # max |admissible line - estimate| over the packets' span
    pairs: dict = field(default_factory=dict)

    @property
    def drift_ppm(self):
        return (self.slope - 1.0) * 1e6

    @property
    def offset_ns(self):
        """t_B - t_A at the reference time x0."""
        return self.y0 - self.x0

    def to_reference(self, t_b):
        """Convert B timestamps (ns) to A's clock."""
        return self.x0 + (np.asarray(t_b, dtype=np.float64) - self.y0) / self.slope

    def from_reference(self, t_a):
        return self.y0 + (np.asarray(t_a, dtype=np.float64) - self.x0) * self.slope

    def as_dict(self):
        return {"quality": self.quality, "reason": self.reason, "drift_ppm": self.drift_ppm,
                "offset_ns": self.offset_ns, "reference_ns": self.x0, "slope": self.slope,
                "slope_min": self.slope_min, "slope_max": self.slope_max,
                "accuracy_ns": self.accuracy_ns, "pairs": self.pairs}


def _lower_hull(pts):
    """Lower convex hull of points sorted by x (Andrew's monotone chain)."""
    h = []
    for p in pts:
        while len(h) >= 2 and _cross(h[-2], h[-1], p) <= 0:
            h.pop()
        h.append(p)
    return h


def _upper_hull(pts):
    h = []
    for p in pts:
        while len(h) >= 2 and _cross(h[-2], h[-1], p) >= 0:
            h.pop()
        h.append(p)
    return h


def _cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def estimate(a_to_b=((), ()), b_to_a=((), ()), accurate_ns=2000.0):
    """Fit t_B = a*t_A + b from packets A->B (send on A, receive on B) and B->A
    (send on B, receive on A), each a pair of equal-length sequences of ns."""
    sa, rb = (np.asarray(v, dtype=np.float64) for v in a_to_b)
    sb, ra = (np.asarray(v, dtype=np.float64) for v in b_to_a)
    pairs = {"a_to_b": int(len(sa)), "b_to_a": int(len(sb))}
    if len(sa) != len(rb) or len(sb) != len(ra):
        return ClockFit("failed", "send and receive sequences differ in length", pairs=pairs)
    if not len(sa) and not len(sb):
        return ClockFit("failed", "no matched packets between the hosts", pairs=pairs)
    if not len(sa) or not len(sb):
        which = "A->B" if len(sa) else "B->A"
        return ClockFit("failed", f"packets in one direction only ({which}): the offset is not bounded "
                                  "on the other side", pairs=pairs)
    # Centre both axes: nanosecond timestamps near 1e18 lose precision in float64 slopes.
    x0 = float(np.concatenate([sa, ra]).mean())
    y0 = float(np.concatenate([rb, sb]).mean())
    ux, uy = sa - x0, rb - y0      # above every admissible line
    lx, ly = ra - x0, sb - y0      # below every admissible line
    o = np.argsort(ux, kind="stable")
    U = np.array(_lower_hull(list(zip(ux[o], uy[o]))))
    o = np.argsort(lx, kind="stable")
    L = np.array(_upper_hull(list(zip(lx[o], ly[o]))))

    def b_hi(a):   # greatest intercept allowed by the points above
        return np.min(U[:, 1] - a * U[:, 0])

    def b_lo(a):   # least intercept allowed by the points below
        return np.max(L[:, 1] - a * L[:, 0])

    def gap(a):
        return b_hi(a) - b_lo(a)

    # Candidate slopes: every line through a hull vertex of U and one of L; the
    # admissible slopes form the interval where gap(a) >= 0 (gap is concave).
    dx = U[:, 0][:, None] - L[:, 0][None, :]
    dy = U[:, 1][:, None] - L[:, 1][None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        cand = (dy / dx)[dx != 0]
    edges = [np.diff(H[:, 1]) / np.diff(H[:, 0]) for H in (U, L) if len(H) > 1]
    cand = np.concatenate([cand, *edges, [1.0]])
    cand = np.unique(cand[np.isfinite(cand)])
    gaps = np.array([gap(a) for a in cand])
    best = int(np.argmax(gaps))
    if gaps[best] < 0:
        return ClockFit("failed", "no line separates the packets (hulls cross): the clocks are not linear "
                                  "over the interval or packets were mismatched", pairs=pairs, x0=x0, y0=y0)
    a_best = cand[best]
    below = cand[(cand < a_best)]
    above = cand[(cand > a_best)]
    a_min = _edge(gap, below, a_best, lower=True)
    a_max = _edge(gap, above, a_best, lower=False)
    if not np.isfinite(a_min) or not np.isfinite(a_max):
        return ClockFit("failed", "the packets do not bound the drift (too few or all at one time)", pairs=pairs)
    b_at_min = (b_hi(a_min) + b_lo(a_min)) / 2
    b_at_max = (b_hi(a_max) + b_lo(a_max)) / 2
    a = (a_min + a_max) / 2
    b = (b_at_min + b_at_max) / 2
    if not b_lo(a) <= b <= b_hi(a):
        b = (b_hi(a) + b_lo(a)) / 2
    # Accuracy: the widest deviation of an admissible line from the estimate at the
    # ends of the span (lines are linear, so the extremes are at the ends).
    xs = [min(ux.min(), lx.min()), 0.0, max(ux.max(), lx.max())]
    grid = np.linspace(a_min, a_max, 257)
    acc = 0.0
    for x in xs:
        hi = max(g * x + b_hi(g) for g in grid)
        lo = min(g * x + b_lo(g) for g in grid)
        est = a * x + b
        acc = max(acc, hi - est, est - lo)
    quality = "accurate" if acc <= accurate_ns else "approximate"
    why = "" if quality == "accurate" else f"accuracy bound {acc:.0f} ns exceeds {accurate_ns:.0f} ns"
    return ClockFit(quality, why,
                    slope=float(a), x0=x0, y0=y0 + float(b), slope_min=float(a_min), slope_max=float(a_max),
                    accuracy_ns=float(acc), pairs=pairs)


def _edge(gap, cands, a_best, lower):
    """The admissible slope farthest from a_best on one side: the root of the
    concave piecewise-linear gap(), bracketed by candidate slopes."""
    cands = np.sort(cands)
    # The farthest candidate with gap >= 0, then bisect toward the first with gap < 0.
    ok = a_best
    seq = cands[::-1] if lower else cands
    bad = None
    for c in seq:
        if gap(c) >= 0:
            ok = c
        else:
            bad = c
            break
    step = 1e-9
    while bad is None and step < 1.0:
        # Beyond the candidates: widen until gap() turns negative (an unbounded
        # side means the packets do not constrain the drift at all).
        c = ok - step if lower else ok + step
        if gap(c) >= 0:
            ok, step = c, step * 2
        else:
            bad = c
    if bad is None:
        return float("nan")
    lo, hi = ok, bad
    for _ in range(200):
        mid = (lo + hi) / 2
        if gap(mid) >= 0:
            lo = mid
        else:
            hi = mid
        if abs(hi - lo) <= 1e-16 * max(1.0, abs(lo)):
            break
    return float(lo)


# User marks that bound a packet's one-way trip: (send mark, receive mark) per
# direction, client -> server and server -> client. They are looser than the
# kernel's device hand-off and receive (the user marks sit outside the
# syscalls), which only widens the hull: the bound stays honest. The catalog names them: the begin mark
# of the sender's step of role send_in, the end mark of the receiver's step of role recv.
def _packet_marks(sender, receiver):
    return step(side_step(sender, "send_in"))["user_events"][0], step(side_step(receiver, "recv"))["user_events"][-1]


USER_PACKET_MARKS = {"a_to_b": _packet_marks("client", "server"), "b_to_a": _packet_marks("server", "client")}


def match_user_packets(ev_a, ev_b, marks=USER_PACKET_MARKS):
    """Pairs of (send ts, receive ts) matched by call id and fragment number, in
    each direction, from the user events of host A (the client) and host B.
    ev_a, ev_b: rpcscope.analysis.traceread.Events. Only the first send and the
    first receive of each (call id, fragment) count: a retransmission would pair
    a receive with the wrong send."""
    out = {}
    for direction, (send, recv) in marks.items():
        snd_ev, rcv_ev = (ev_a, ev_b) if direction == "a_to_b" else (ev_b, ev_a)
        s = _first_by_key(snd_ev, send)
        r = _first_by_key(rcv_ev, recv)
        keys = sorted(set(s) & set(r))
        out[direction] = (np.array([s[k] for k in keys], np.int64), np.array([r[k] for k in keys], np.int64))
    return out


def _first_by_key(ev, name):
    m = ev.mask(kind="user", name=name)
    ts, cid, frag = ev.ts[m], ev.call_id[m], ev.frag[m]
    d = {}
    for t, c, f in zip(ts.tolist(), cid.tolist(), frag.tolist()):
        d.setdefault((c, f), t)
    return d


def summary_line(cs):
    """steps.json's clock_sync (steps.clock_sync_summary) as one sentence, for `rpcscope analyze` and the
    report's run summary."""
    if not cs or not cs.get("cases"):
        return "no case to estimate it on"
    if "offset_ns_range" not in cs:
        return f"failed in every case ({cs['cases']})" + _flagged(cs)
    lo, hi = (x / 1000 for x in cs["offset_ns_range"])
    alo, ahi = (x / 1000 for x in cs["accuracy_ns_range"])
    dlo, dhi = cs["drift_ppm_range"]
    who = f"{cs.get('host') or 'server'} vs {cs.get('reference') or 'client'}"
    pts = cs.get("points_range")
    line = (f"{who}, {cs['method'].split(' (')[0]}: offset {lo:+.1f} to {hi:+.1f} us, accuracy bound "
            f"{alo:.1f}-{ahi:.1f} us, drift {dlo:+.1f} to {dhi:+.1f} ppm"
            + (f", {pts[0]}-{pts[1]} points" if pts else "") + f", quality {'/'.join(cs['quality'])}"
            + (f", failed in {cs['failed']} of {cs['cases']} cases" if cs["failed"] else ""))
    if cs["shared_kernel"]:
        line += (f"; one kernel clock: zero within its bound in {cs['zero_within_bound']} of "
                 f"{cs['cases'] - cs['failed']} cases")
    elif "applied" in cs:
        line += f"; applied to the server's events in {cs['applied']} of {cs['cases']} cases"
    return line + _checked(cs) + _flagged(cs)


def _checked(cs):
    c = cs.get("check")
    if not c:
        return ""
    if c["errors"] and not c["agrees"]:
        return f"; independent check (ssh timestamps) not made: {c['errors'][0]}"
    return f"; independent check (ssh timestamps): agrees within the bounds in {c['agrees']} of {c['cases']} cases"


def _flagged(cs):
    n = len(cs.get("flagged") or [])
    return f"; FLAGGED in {n} case{'s' if n > 1 else ''} (cross-host order not established)" if n else ""
