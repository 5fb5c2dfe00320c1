"""A case's walked round-trip paths (analysis/rtp.py analyze_case) as figures: the typical call's path,
step by step, with the probe-corrected times (aggregate), and how each event's probe cost is split
between the step it lies in and the rest of the call (probe_split, split_charges).
"""
import collections

import numpy as np

from rpcscope.tracepoints import SPLIT, STEPS

from .rpcs import EXTRA_ROWS
from .run import call_edges_ns

# "The typical call": the RPCs whose corrected RTT lies nearest the median, this share of them. Nearest
# in value, not the 40th-60th percentiles: where a traced run is bimodal (UDP 0 can have ~45 % of its
# calls on a path with interrupt-borne wake-ups ~13 us longer), a percentile band straddles both modes,
# its mean lies ~2.7 us above the median, and its server wake-up (S2) ~4.1 us against ~2.8 at the
# median call.
TYPICAL_SHARE = 0.2


_SIDE = {s["id"]: s["side"] for s in STEPS}
_SIDE.update({k: v[0] for k, v in EXTRA_ROWS.items()})
_CATALOG_RTP = {s["id"] for s in STEPS if s["rtp"]} | {n for n, p in SPLIT.items() if p["rtp"]}
# The part of the round trip the client's own clock measures (rpc/bench.c: a clock read each side of
# the call) outside the traced span C1 .. C21: the call into the stub up to C1's timestamp, C21's
# tracepoint after its timestamp, the return. Its time per call is the traced run's client-measured p50
# less the p50 of its walked RTTs (run.call_edges_ns): 130-200 ns on the project's VM. The untraced RTT
# it is compared with is clock to clock, and the probe calibration charges the whole measured probe
# effect to the events on the path, so the path without it comes out ~150 ns short at every size.
CALL_EDGES = "client call edges"


def _pct(a, q):
    return float(np.percentile(a, q)) if len(a) else None


# An event's calibrated cost (analysis/probe.py: what one event on the path adds to the traced RTT,
# ~200 ns on this VM) is more than the time it takes inside its own step: the steps that hold one user
# tracepoint and no code of their own (C4 "packet setup", C20 "free", ...) take 85-90 ns traced, and
# over UDP, whose kernel events cost ~370 ns, the steps of one kernel event (C8'', S3, C17) 250-400 ns.
# Charged whole to the step it lies in, every such step comes out at -0.1 to -0.26 us, and the steps
# that do work keep the rest of the events' cost (the tracer's cache and TLB traffic, its daemons'
# time on the CPUs) as their own (C5's copy of 24 KB over TCP: 69 ns, where the clock build's reads,
# one ~30 ns read included, give 210; with the split, 169).
# So each class of event (user, kernel) is charged in place only what the emptiest step holding one
# event of that class and nothing else takes (its direct cost: that step's mean over the RPCs where it
# holds just that, in SPLIT_MIN_SHARE of them or more), and the rest of every event's cost on the path
# is taken off the call's segments in proportion to the time they keep after their direct charges.
# The path's total correction is unchanged.
SPLIT_MIN_SHARE = 0.5
# A class's cost is one figure per event (the in-situ calibration's); older captures' loopback
# calibrations cost each kernel event by its name, and a class whose events' costs differ by more than
# this fraction is charged in place.
SPLIT_COST_SPREAD = 0.01
SPLIT_CLASSES = ("user", "kernel")


def probe_split(per):
    """{"user": ..., "kernel": ...} over the walked RPCs (per_rpc with segments carrying their (user,
    kernel) event counts), each {"event_ns", "direct_ns", "direct_from"} or None (no probe cost, no
    step holding one event of that class alone, or costs that differ per event: charged in place);
    None when the segments carry no event counts."""
    ratios = {k: [] for k in SPLIT_CLASSES}
    alone = {k: collections.defaultdict(list) for k in SPLIT_CLASSES}
    for p in per:
        for seg in p.get("segments") or ():
            if len(seg) < 6:
                return None
            lab, _, d, pc, nu, nk = seg[:6]
            for k, mine, other in (("user", nu, nk), ("kernel", nk, nu)):
                if mine and not other and pc > 0:
                    ratios[k].append(pc / mine)
                if mine == 1 and not other and lab in _SIDE:
                    alone[k][lab].append(d)
    out = {}
    for k in SPLIT_CLASSES:
        means = {lab: float(np.mean(v)) for lab, v in alone[k].items() if len(v) >= SPLIT_MIN_SHARE * len(per)}
        r = np.array(ratios[k])
        if not means or not len(r) or (r.max() - r.min()) > SPLIT_COST_SPREAD * np.median(r):
            out[k] = None
            continue
        lab = min(means, key=lambda x: (means[x], x))
        cost = float(np.median(r))
        out[k] = {"event_ns": cost, "direct_ns": min(cost, means[lab]), "direct_from": lab}
    return out


def split_charges(segments, split):
    """What the correction takes off each segment of one RPC ([(label, offset, duration, in-place
    charge, user events, kernel events)]), by probe_split's rule: each event's direct cost in place,
    and the rest of the events' cost over the segments in proportion to the time they keep after that
    (none to a segment with none left). Sums to the in-place charges' total. Without a split (or event
    counts): the in-place charges."""
    if not split or any(len(seg) < 6 for seg in segments):
        return [seg[3] if len(seg) > 3 else 0.0 for seg in segments]
    extra = [(c["event_ns"] - c["direct_ns"]) if c else 0.0 for c in (split.get(k) for k in SPLIT_CLASSES)]
    direct = [seg[3] - seg[4] * extra[0] - seg[5] * extra[1] for seg in segments]
    spread = sum(seg[3] for seg in segments) - sum(direct)
    left = [max(0.0, seg[2] - c) for seg, c in zip(segments, direct)]
    room = sum(left)
    if room <= 0:
        return [seg[3] for seg in segments]
    return [c + spread * x / room for c, x in zip(direct, left)]


def aggregate(res):
    """Per step (or kernel segment): on-path RPCs, occurrences, time, share of RTT; slack of
    the overlapped ones."""
    per = res["per_rpc"]
    n = len(per)
    rtt = np.array([p["rtt_ns"] for p in per], float)
    on = collections.defaultdict(lambda: np.zeros(n))
    cnt = collections.defaultdict(lambda: np.zeros(n))
    first = collections.defaultdict(list)
    cost = collections.defaultdict(lambda: np.zeros(n))
    split = probe_split(per)
    taken = collections.defaultdict(lambda: np.zeros(n))
    for i, p in enumerate(per):
        seen = set()
        for (lab, off, d, *pc), t in zip(p["segments"], split_charges(p["segments"], split)):
            on[lab][i] += d
            cnt[lab][i] += 1
            cost[lab][i] += pc[0] if pc else 0.0
            taken[lab][i] += t
            if lab not in seen:
                seen.add(lab)
                first[lab].append(off)
        for lab, k in (p.get("occurrences") or {}).items():     # occurrences, not pieces (path_occurrences)
            cnt[lab][i] = k
    # The typical call (the DCE study's per-step costs add up to one RTT): the RPCs whose
    # probe-corrected RTT lies nearest its median (TYPICAL_SHARE of them). Mean times over those RPCs
    # are additive, so the steps' typical costs sum to the band's mean RTT, which sits at the median
    # (medians of the steps would not add up).
    corr = rtt - np.array([p.get("probe_ns", 0.0) for p in per], float)
    band = np.zeros(n, bool)
    if n:
        band[np.argsort(np.abs(corr - np.median(corr)), kind="stable")[:max(1, round(n * TYPICAL_SHARE))]] = True
    nb = int(band.sum())
    order = {lab: float(np.median(v)) for lab, v in first.items()}
    off_ns = collections.defaultdict(list)
    slk = collections.defaultdict(list)
    for p in per:
        for name, (o, s) in p["slack"].items():
            off_ns[name].append(o)
            slk[name].append(s)
    rows = []
    for lab in sorted(on, key=lambda x: order[x]):
        m = on[lab] > 0
        rows.append({"segment": lab, "step": lab if lab in _SIDE else None, "rpcs_on_path": int(m.sum()),
                     "first_offset_median_ns": order[lab],
                     "on_path_frac": float(m.mean()) if n else 0.0,
                     "count_median": float(np.median(cnt[lab])),
                     "median_ns": float(np.median(on[lab])), "mean_ns": float(on[lab].mean()),
                     "share_of_rtt": float(on[lab].sum() / rtt.sum()) if rtt.sum() else 0.0,
                     "probe_median_ns": float(np.median(cost[lab])),
                     "typical_ns": float(on[lab][band].mean()) if nb else None,
                     # what the correction took off it: its events' in-place charge, or with the split
                     # (probe_split) their direct cost and its share of every event's rest
                     "typical_probe_ns": float(taken[lab][band].mean()) if nb else None,
                     "typical_corrected_ns": float((on[lab][band] - taken[lab][band]).mean()) if nb else None,
                     "typical_count": float(cnt[lab][band].mean()) if nb else None,
                     "catalog_rtp": lab in _CATALOG_RTP})
    over = []
    for name in sorted(slk, key=lambda x: [s["id"] for s in STEPS].index(x) if x in _SIDE and
                       x in [s["id"] for s in STEPS] else 99):
        a = np.array(slk[name], float)
        over.append({"step": name, "rpcs_with_overlap": len(a), "off_path_median_ns": float(np.median(off_ns[name])),
                     "slack_min_ns": float(a.min()), "slack_p10_ns": _pct(a, 10), "slack_median_ns": _pct(a, 50),
                     "fully_overlapped_rpcs": int(sum(1 for p in per if name in p["slack"] and
                                                      not any(s[0] == name for s in p["segments"])))})
    # The call's edges (CALL_EDGES): the walk spans C1 .. C21, the client's clock a little more.
    edges = call_edges_ns(res, rtt.tolist())
    if edges is not None:
        rows.insert(0, {"segment": CALL_EDGES, "step": None, "rpcs_on_path": n, "first_offset_median_ns": 0.0,
                        "on_path_frac": 1.0, "count_median": 1.0, "median_ns": edges, "mean_ns": edges,
                        "share_of_rtt": edges / float(rtt.mean()) if rtt.sum() else 0.0, "probe_median_ns": 0.0,
                        "typical_ns": edges if nb else None, "typical_probe_ns": 0.0 if nb else None,
                        "typical_corrected_ns": edges if nb else None,
                        "typical_count": 1.0 if nb else None, "catalog_rtp": False})
    plus = edges or 0.0
    err = np.array([abs(p["sum_ns"] - p["rtt_ns"]) for p in per], float)
    # The probe cost with the dependencies kept (retime) beside the walked path's own: what overlap
    # absorbs of the correction (zero unless a branch beside the path had less slack than it sheds).
    rt = np.array([(p["probe_ns"], p["probe_retimed_ns"]) for p in per if "probe_retimed_ns" in p], float)
    retimed = None
    if len(rt):
        absorbed = np.round(rt[:, 0] - rt[:, 1], 1) + 0.0     # to 0.1 ns: the two sums differ by float rounding
        retimed = {"rpcs": len(rt), "path_probe_median_ns": float(np.median(rt[:, 0])),
                   "median_ns": float(np.median(rt[:, 1])), "absorbed_median_ns": float(np.median(absorbed)),
                   "absorbed_p90_ns": float(np.percentile(absorbed, 90)),
                   "rpcs_absorbing": int((absorbed > 1.0).sum())}
    # One real call to draw (the reports' Figure-5 diagram): the clean RPC whose corrected RTT is the
    # closest to the median, its path segments in time order (consecutive pieces of one segment merged).
    example = None
    clean = [i for i, p in enumerate(per) if p["ok"]]
    if clean:
        med = float(np.median(corr[clean]))
        i = min(clean, key=lambda k: abs(corr[k] - med))
        segs = []
        for lab, off, d, *pc in per[i]["segments"]:
            if segs and segs[-1]["segment"] == lab and abs(segs[-1]["begin_ns"] + segs[-1]["dur_ns"] - off) < 1:
                segs[-1]["dur_ns"] += d
                segs[-1]["probe_ns"] += pc[0] if pc else 0.0
            else:
                segs.append({"segment": lab, "step": lab if lab in _SIDE else None, "begin_ns": float(off),
                             "dur_ns": float(d), "probe_ns": float(pc[0]) if pc else 0.0})
        example = {"call_id": per[i]["call_id"], "rtt_ns": float(rtt[i]), "corrected_rtt_ns": float(corr[i]),
                   "segments": segs}
    return {"case": res["case"], "transport": res["transport"], "proc": res["proc"], "size": res["size"],
            "rpcs": res["rpcs"], "walked": res["walked"], "clean": int(sum(p["ok"] for p in per)),
            "rtt_median_ns": float(np.median(rtt)) if n else None,
            "call_edges_ns": edges,
            "probe_costs": bool(res.get("probe_costs")),
            "rtt_corrected_median_ns": float(np.median(corr)) + plus if n else None,
            "probe_on_path_median_ns": float(np.median(rtt - corr)) if n else None,
            "probe_retimed": retimed,
            "path_events_median": {k: float(np.median([p["path_events"][i] for p in per])) if n else None
                                   for i, k in enumerate(("ust", "kernel_net", "kernel_other"))},
            "probe_calibration": res.get("probe_calibration"),
            "probe_split": split,
            "untraced_p50_ns": res.get("untraced_p50_ns"),
            "typical": {"band": f"the {TYPICAL_SHARE:.0%} of RPCs nearest the median corrected RTT", "rpcs": nb,
                        "rtt_mean_ns": float(rtt[band].mean()) + plus if nb else None,
                        "corrected_rtt_mean_ns": float(corr[band].mean()) + plus if nb else None},
            "sum_check_max_abs_ns": float(err.max()) if n else None,
            "problems": dict(res["problems"]), "path": rows, "overlapped": over, "example_rpc": example}
