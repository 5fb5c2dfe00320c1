"""The probe effect: what one recorded event of each kind costs the call, measured in place.

Every case of the capture ran, in each of its rounds, untraced and traced (user and kernel events,
and with capture --user-only-runs user events only). The round-trip path of a sample of each case's
traced calls is walked (analysis/rtp.py) and its events counted per kind: user, kernel network
device (one per packet per device), other kernel (syscalls, scheduler, softirq). With a case's probe
effect d = traced - untraced p50 (medians over its rounds: case_point),

    d = (n_user + n_kernel) x c                 (one cost for every event), or
      = n_user x c_user + n_kernel x c_kernel   (user and kernel events apart)

is solved by weighted least squares over the cases of a transport (solve; each case weighs
1 / its rounds' noise^2), and every case of that transport is corrected with those costs
(solve_cases). The sizes the model predicts (capture --holdout) and the cases whose untraced run
took another path than the traced one never set a cost. No case's costs are scaled to its own
RTT: the correction of a size is what its events cost at the transport's per-event prices.

What an event costs beyond its own instructions where the call really runs (tracer daemons sharing
the CPUs, cache effects) is folded into these costs. Cached in RUN/analysis/probe.json.
"""
import json

import numpy as np

from rpcscope.rundir import PROBE_FORMAT, PROBE_JSON

from .rtp import analyze_case
from .run import Case, level_p50_ns, level_rounds_p50s, path_shape


def in_situ(run):
    """{"transports": {transport: costs}, "cases": {case id: costs}} where costs = {"source": "in-situ",
    "ust_event_ns", "kernel_event_ns": {"net", "other"}, "method", ...}; {} when the run has no usable
    in-situ calibration (the manifest's loopback calibration is used then). Cached in
    RUN/analysis/probe.json."""
    meta = run.manifest.get("calibration_in_situ") or {}
    if meta.get("method") == "per case":
        return _per_case(run)
    cals = run.in_situ_calibrations()
    usable = {}
    for transport, m in cals.items():
        sizes = {int(k): v for k, v in m["sizes"].items()
                 if not v.get("lossy") and (run.path / v["dir"] / "ust").is_dir()
                 and (run.path / v["dir"] / "kernel").is_dir()}
        if 0 in sizes:
            usable[transport] = (m, sizes)
    if not usable:
        return {}
    key = {t: {str(k): {"p50": v["p50_median_ns"], "dir": v["dir"], "pids": v.get("pids")} for k, v in sz.items()}
           for t, (_, sz) in usable.items()}
    got = _cached(run, key)
    if got is not None:
        return got
    out = {"transports": {}, "cases": {}}
    for transport, (m, sizes) in usable.items():
        r = _calibrate(run, m, sizes)
        if r:
            out["transports"][transport] = r
    return _save(run, key, out)


def path_probe_ns(run, case_id):
    """The probe cost on a case's round-trip path per call: its events per class on the path (the
    calibration's walk) times the costs the case is corrected with (the other cases', leave one out).
    None without a per-case in-situ calibration of that case."""
    pr = run.probe
    costs = case_costs(run, case_id)
    point = next((v["points"][case_id] for v in (pr.get("transports") or {}).values()
                  if case_id in (v.get("points") or {})), None)
    if point is None or not _has_costs(costs):
        return None
    return _path_cost(point["path_events_per_call"], costs)


def case_costs(run, case_id):
    """The costs a case is corrected with (probe.json cases[case_id]: the other cases', anchored where
    it was, with the record of how), {} where the run has none for it."""
    return (run.probe.get("cases") or {}).get(case_id) or {}


def _has_costs(costs):
    """Whether costs hold a user and a kernel event's cost."""
    return bool(costs) and costs.get("ust_event_ns") is not None and bool(costs.get("kernel_event_ns"))


def _path_cost(ev, costs):
    """What events per class on a path ({"ust", "kernel_net", "kernel_other"}) cost at costs (a cost
    below zero counts nothing)."""
    k = costs["kernel_event_ns"]
    return (ev["ust"] * max(0.0, costs["ust_event_ns"]) + ev["kernel_net"] * max(0.0, k["net"])
            + ev["kernel_other"] * max(0.0, k["other"]))


def _cached(run, key):
    try:
        got = json.loads((run.out_dir / PROBE_JSON).read_text())
    except (OSError, ValueError):
        return None
    if got.get("format") == PROBE_FORMAT and got.get("key") == key:
        return {"transports": got["transports"], "cases": got["cases"]}
    return None


def _save(run, key, out):
    run.out_dir.mkdir(parents=True, exist_ok=True)
    (run.out_dir / PROBE_JSON).write_text(json.dumps({"format": PROBE_FORMAT, "key": key, **out}, indent=1,
                                                      default=float) + "\n")
    return out


# RPCs walked per case: the events on a case's path are the same in nearly every call (on this VM's
# captures the 25th and 75th percentiles of each class equal the median), so an evenly spaced sample
# gives the median of all of them; the point records the sample's quartiles to show it.
PATH_SAMPLE_RPCS = 32


def _path_events(case):
    """Events per class on the round-trip path of a case's clean RPCs, over an evenly spaced sample:
    (n RPCs walked, median [user, net, other], [25th, 75th percentile])."""
    res, rpcs = analyze_case(case, sample=PATH_SAMPLE_RPCS, detail=False)
    rpcs.release()
    ev = np.array([p["path_events"] for p in res["per_rpc"] if p.get("ok")], float)
    if not len(ev):
        return 0, None, None
    return len(ev), np.median(ev, axis=0), np.percentile(ev, [25, 75], axis=0)


def _point(case, untraced, ust, both, rounds=None):
    """One calibration point: the case's events per class on its path and its p50 differences (untraced,
    user events only, user and kernel events), with how far each difference moves (noise_ns, from the
    rounds' p50s); None when fewer than half the sample could be walked. ust is None for a capture
    without user-only runs (the default): the point then has only d_total_ns."""
    n, ev, quart = _path_events(case)
    if n < PATH_SAMPLE_RPCS // 2:
        return None
    split = ust is not None
    return {"transport": case.transport, "size": case.size, "rpcs_walked": n,
            "untraced_path": path_shape(case.meta),
            "noise_ns": point_noise(untraced, rounds),
            "path_events_per_call": {"ust": ev[0], "kernel_net": ev[1], "kernel_other": ev[2]},
            "path_events_quartiles": {"ust": quart[:, 0].tolist(), "kernel_net": quart[:, 1].tolist(),
                                      "kernel_other": quart[:, 2].tolist()},
            "d_total_ns": both - untraced, "d_user_ns": ust - untraced if split else None,
            "d_kernel_ns": both - ust if split else None,
            "p50_ns": {"untraced": untraced, "ust": ust, "both": both}}


# The least noise a point is credited with, as a fraction of its untraced p50: the spread of a few
# rounds can be near zero by chance, and no point should outweigh the others by that alone.
NOISE_FLOOR = 0.005


def point_noise(untraced, rounds):
    """{"d_total", "d_user", "d_kernel"}: how far a point's p50 differences (user+kernel - untraced,
    user-only - untraced, user+kernel - user-only) move, in ns: from the half-range of each kind's round
    p50s (rounds: {"untraced", "ust", "traced": [p50 ns]}), the two kinds of a difference added in
    quadrature, at least NOISE_FLOOR of the untraced p50. A host's burst of noise over some rounds of
    one case makes that case's differences unreliable; the solver weighs each point by 1 / noise^2, so
    such a point does not set the costs the other cases are corrected with (one case whose rounds lie
    12-33 % apart can pull every other case's correction of its transport 3-5 % low).
    A difference one of whose kinds ran a single round in the level has no spread to tell: its noise is
    None, unknown, and the point weighs as the median of the others (_weights)."""
    floor = NOISE_FLOOR * untraced
    u, s, t = (_half_range((rounds or {}).get(k)) for k in ("untraced", "ust", "traced"))

    def moves(a, b):
        return None if a is None or b is None else max(floor, float(np.hypot(a, b)))
    out = {"d_total": moves(u, t)}
    if (rounds or {}).get("ust"):
        out.update(d_user=moves(u, s), d_kernel=moves(s, t))
    return out


def _half_range(p50s):
    """Half the spread of a kind's round p50s in the level: 0 where the capture made no rounds (every
    point alike at the floor), None where one round ran in the level (unknown: a spread of nought is no
    evidence of quiet, and such a point weighed as the least noisy there could be would set every other
    case's costs)."""
    if not p50s:
        return 0.0
    return (max(p50s) - min(p50s)) / 2 if len(p50s) > 1 else None


def _inverse_variance(noise):
    """Weights 1 / noise^2 scaled to a mean of 1, a None noise (unknown) taking the median of the known
    ones; every weight 1 where none is known."""
    known = [x for x in noise if x]
    if not known:
        return np.ones(len(noise))
    mid = float(np.median(known))
    w = 1.0 / np.square(np.array([x if x else mid for x in noise], float))
    return w / w.mean()


def _rounds(meta, kinds=("untraced", "ust", "traced")):
    """Each kind's rounds' p50s in the kept round's speed level: a switch of the host's level between
    rounds is not noise of the kept round's differences (they come from one round, in one level)."""
    return {k: level_rounds_p50s(meta, k) for k in kinds}


def _per_case(run):
    """Every case ran, in each round, untraced and with user and kernel events (and with user events
    only, in captures with user-only runs: collectors/capture.py sweeps): its own p50 differences and the
    events on its path are one point.
    A case is corrected with the costs solved from the OTHER cases of its transport (leave one out), so
    that its corrected RTT is a prediction, not a fit to itself."""
    key = _per_case_key(run)
    if not key:
        return {}
    got = _cached(run, key)
    if got is not None:
        return got
    return per_case_solve(run, key, {c.id: case_point(c) for c in _per_case_cases(run)})


def _holdout_ids(run):
    """The cases of the sizes the capture was told the model will predict (capture --holdout)."""
    sizes = set(run.params.get("holdout") or ())
    return sorted(c.id for c in run.cases if c.size in sizes)


def _per_case_cases(run):
    return [c for c in run.cases if c.complete and not c.meta.get("lossy") and c.has_kernel()]


def _per_case_key(run):
    key = {c.id: [c.meta["untraced"]["p50"], (c.meta.get("ust_only") or {}).get("p50"), c.meta["traced"]["p50"],
                  c.meta.get("pids"), c.meta.get("sleeps_per_call")]
           for c in _per_case_cases(run)}
    held = _holdout_ids(run)
    if key and held:
        key["holdout"] = held
    return key


def per_case_pending(run):
    """(key, cases) when the run's per-case calibration still has its cases' paths to walk (case_point
    of each, then per_case_solve); None when probe.json holds it already, or the run has none."""
    if (run.manifest.get("calibration_in_situ") or {}).get("method") != "per case":
        return None
    key = _per_case_key(run)
    if not key or _cached(run, key) is not None:
        return None
    return key, _per_case_cases(run)


def case_point(case):
    """A case's calibration point (_point), or None; walked before any calibration exists.
    Where the runs took turns (capture --turns), its p50s are the kept round's: the round whose traces
    give the path and whose untraced run gives Measured (analysis/model_input.py). Its kinds took turns
    through the same moments of the host, so their difference is the probe effect that round's path
    holds; the rounds of one capture can alternate between regimes of the host whose probe effects
    differ by 10-15 %, and a median over them would take off a probe effect the path never had.
    Else its p50s are the medians of each kind's rounds in the kept round's speed level
    (run.level_p50_ns), where every kind has them: the runs one after the other move by 1-3 % of the RTT
    (ust - untraced is 4-8 us) from one round to the next."""
    p50 = {"untraced": case.meta["untraced"]["p50"], "traced": case.meta["traced"]["p50"]}
    if case.meta.get("ust_only"):
        p50["ust"] = case.meta["ust_only"]["p50"]
    level = {k: level_p50_ns(case.meta, k) for k in p50}
    if not (case.meta.get("repeats") or {}).get("turns") and all(v is not None for v in level.values()):
        p50 = level
    point = _point(case, p50["untraced"], p50.get("ust"), p50["traced"], _rounds(case.meta))
    if point is not None:
        point["traced_kept_p50_ns"] = case.meta["traced"]["p50"]
    return point


def per_case_solve(run, key, points):
    """The per-case calibration from every case's point ({case id: point or None}); saved in probe.json."""
    return _save(run, key, solve_cases(points, _holdout_ids(run)))


def solve_cases(points, holdout=()):
    """{"transports": {transport: costs}, "cases": {case id: costs}} for points {case id: point or None}.
    Per transport, one cost per event kind is solved by least squares over its cases' traced minus
    untraced p50s against the events on their paths (solve), and every case of the transport is
    corrected with those same costs: no case is scaled to its own RTT. The cases in holdout (the sizes
    the model predicts: capture --holdout) never solve a cost, so that nothing measured at a predicted
    size enters the correction; nor does a case whose untraced run blocked in other waits or was woken
    by other interrupts than its traced run (took_another_path): its difference is then not the
    probes' cost alone."""
    points = {cid: pt for cid, pt in points.items() if pt}
    out = {"transports": {}, "cases": {}}
    for transport in sorted({p["transport"] for p in points.values()}):
        pts = {cid: p for cid, p in points.items() if p["transport"] == transport}
        fitted = {cid: p for cid, p in pts.items() if cid not in holdout}
        other_path = sorted(cid for cid, p in fitted.items() if took_another_path(p))
        solvers = {cid: p for cid, p in fitted.items() if cid not in other_path}
        if len(solvers) < 2:      # too few on the traced path to solve anything: use them all, and say so
            other_path, solvers = [], fitted
        if len(solvers) < 2:
            continue
        but = [w for w, there in (("the held-out ones", any(cid in holdout for cid in pts)),
                                  ("those whose untraced run took another path", other_path)) if there]
        every = out["transports"][transport] = _costs(
            solvers, "in-situ, every case" + (" but " + " and ".join(but) if but else ""), transport)
        every["other_path_cases"] = other_path
        for cid in pts:
            out["cases"][cid] = dict(every, points=None, solved_from=sorted(solvers))
    return out


def took_another_path(point):
    """Whether the point's untraced run took another path than its traced run (analysis/run.py
    path_shape: sleeps and IPIs per call of the client and the server); False where the capture did
    not count them."""
    return (point.get("untraced_path") or {}).get("same") is False


def _costs(points, source, transport, form=None):
    """The costs solved from points in the model `form` (solve; None: chosen here)."""
    c_user, c_kernel, method, used = solve(points, form)
    alone = _user_alone(points)
    return {"source": source, "transport": transport, "method": method, "points": points, "form": used,
            "ust_event_ns": round(c_user, 1) if c_user is not None else None,
            "kernel_event_ns": ({"net": round(c_kernel, 1), "other": round(c_kernel, 1)}
                                if c_kernel is not None else None),
            "ust_alone_event_ns": round(alone, 1) if alone is not None else None}


def _calibrate(run, meta, sizes):
    """An older run's separate calibration phase: one point per calibrated size."""
    per = {}
    for size, v in sorted(sizes.items()):
        case = Case(run, {"id": f"calibration-in-situ-{meta['transport']}-{size}", "transport": meta["transport"],
                          "proc": meta["proc"], "size": size, "calls": meta["calls"], "warmup": meta["warmup"],
                          "dir": v["dir"], "pids": v.get("pids") or {}})
        med = v["p50_median_ns"]
        pt = _point(case, med["untraced"], med["ust"], med["both"],
                    {"untraced": v["p50_ns"].get("untraced"), "ust": v["p50_ns"].get("ust"),
                     "traced": v["p50_ns"].get("both")})
        if pt:
            per[size] = dict(pt, spread_ns={k: [min(x), max(x)] for k, x in v["p50_ns"].items()})
    if 0 not in per:
        return None
    return dict(_costs({str(k): v for k, v in per.items()}, "in-situ", meta["transport"]), rounds=meta.get("rounds"))


def _weights(per, key):
    """Per point 1 / noise^2 of its difference `key` ("d_total", "d_user"; point_noise), scaled to a
    mean of 1; a point whose noise is unknown (None: one round in its level) weighs as the median of the
    others (_inverse_variance); every point 1 where a point has no noise recorded (older probe files)."""
    noise = [(p.get("noise_ns") or {}).get(key, 0.0) for p in per.values()]
    if not noise or any(x is not None and not x for x in noise):
        return np.ones(len(noise))
    return _inverse_variance(noise)


def _wlstsq(X, y, w):
    """Weighted least squares: rows scaled by sqrt(w)."""
    r = np.sqrt(w)
    return np.linalg.lstsq(X * r[:, None], y * r, rcond=None)[0]


def _wrms(errors, w):
    """The weighted root mean square of relative errors, in %: a noisy point's miss counts less."""
    e = np.array(errors, float)
    return 100 * float(np.sqrt(np.sum(w * e * e) / np.sum(w))) if len(e) else 0.0


def _fit(nu, nk, d, w, form):
    """Weighted least squares of the probe effects d over user events nu and kernel events nk:
    (c_user, c_kernel), equal in form "pooled"; None in form "apart" unless both come out positive."""
    if form == "pooled":
        c = _per_event(nu + nk, d, w)
        return None if c is None else (c, c)
    if len(d) < 2:
        return None
    c = _wlstsq(np.stack([nu, nk], axis=1), d, w)
    return (float(c[0]), float(c[1])) if c.min() > 0 else None


def _arrays(per):
    ev = [p["path_events_per_call"] for p in per.values()]
    nu = np.array([e["ust"] for e in ev], float)
    nk = np.array([e["kernel_net"] + e["kernel_other"] for e in ev], float)
    d = np.array([p["d_total_ns"] if p.get("d_total_ns") is not None else p["d_user_ns"] + p["d_kernel_ns"]
                  for p in per.values()], float)
    return nu, nk, d


# The split is kept only where leaving any one point out moves neither cost by more than this fraction.
# Where every path has user and kernel events in nearly one ratio (TCP: 33 user events at every size,
# 26 kernel events at all but 1392's 28 with the full event set, 17 and 18 with the lean one), the two
# costs are not determined, and the total's noise moves them along the line that gives the same totals:
# over one TCP capture with the full event set (2.8 % rms apart against 2.9 % pooled, a quiet 4016
# weighing most) the user event costs 43-224 ns and the kernel event 177-406 ns as one point or another
# is left out. Each case is corrected with the costs solved without it (solve_cases), so such a split
# charges one size's user steps up to four times what the next size's are. Where the split is determined
# (UDP: a fragment adds kernel events and no user event) it moves by 5-14 %.
SPLIT_MOVE_LIMIT = 0.25
# With three points every left-out fit solves the two costs from two points exactly, so how far it moves
# says how close those two lie, not whether the split follows noise: UDP's 0, 1392 and 4016 (the cases
# left to solve where the larger sizes take another path) differ by four kernel events between the first
# two, and their left-out splits move by 31-35 % while the split over them predicts a left-out point
# within 3.0-3.3 % rms against pooled's 4.5-6.2 %. There the split is kept where the points'
# user-to-kernel event ratios span at least this factor (UDP 0, 1392, 4016: 1.75; TCP's paths, one
# ratio: 1.06).
SPLIT_RATIO_SPREAD = 1.25


def solve(per, form=None):
    """(c_user, c_kernel, method, form) from points {id: {"path_events_per_call": {"ust", "kernel_net",
    "kernel_other"}, "d_user_ns", "d_kernel_ns", "noise_ns"}}: the costs of one user and one kernel event
    on the path that best give every point's probe effect, traced minus untraced p50 (d_user + d_kernel).

    Two models: one cost for every event ("pooled"), or user and kernel events apart ("apart"). With
    three points or more each predicts every point from the others, and apart is kept when it predicts
    them better, every such fit is positive and, where the points' event ratios span less than
    SPLIT_RATIO_SPREAD, none moves a cost by more than SPLIT_MOVE_LIMIT (with three points: their event
    ratios span SPLIT_RATIO_SPREAD) (over TCP
    every size's path has user and kernel events in nearly one ratio: the two costs cannot be told apart
    there, and a split solved from them follows the noise).
    form: solve that model where the points can (solve_cases passes the one chosen over the transport).

    Why the total and not each share from its own runs (user-only minus untraced for the user events,
    traced minus user-only for the kernel's): a user event costs more where kernel events are recorded
    too. Over ten 5000-call UDP captures, a user event comes out at 190-217 ns from the total and
    128-147 ns from the user-only runs, kernel events at 271-290 ns against 297-330 plus a cost per
    call; the user-only run measures a cost the traced run does not have, and its own noise enters both
    shares with opposite signs. From the total, a left-out size's probe effect is predicted within
    1.86 % of its RTT (rms) against 2.44 % from the shares."""
    nu, nk, d = _arrays(per)
    w = _weights(per, "d_total")
    n = len(d)
    apart = _fit(nu, nk, d, w, "apart")
    if form == "pooled" or (form == "apart" and apart is not None):
        return _result(form, apart, _fit(nu, nk, d, w, "pooled"), n,
                       "the model chosen over every case of the transport")
    if apart is None or n < 3:
        why = "user and kernel events have no positive separate solution" if n >= 2 else "one point"
        return _result("pooled", None, _fit(nu, nk, d, w, "pooled"), n, why)
    err = {"pooled": [], "apart": []}
    fragile, moved = False, 0.0
    for i in range(n):
        m = np.arange(n) != i
        fits = {"pooled": _fit(nu[m], nk[m], d[m], w[m], "pooled"), "apart": _fit(nu[m], nk[m], d[m], w[m], "apart")}
        fragile |= fits["apart"] is None
        if fits["apart"] is not None:
            moved = max(moved, *(abs(a - b) / b for a, b in zip(fits["apart"], apart)))
        for k, c in fits.items():
            c = c or fits["pooled"]
            # A left-out fit with nothing to solve from (no events on the other paths) misses by all of d.
            err[k].append(((c[0] * nu[i] + c[1] * nk[i] if c else 0.0) - d[i]) / d[i] if d[i] else 0.0)
    rms = {k: _wrms(v, w) for k, v in err.items()}
    why = (f"a left-out point's probe effect predicted within {rms['pooled']:.1f} % rms pooled, "
           f"{rms['apart']:.1f} % apart")
    both = (nu > 0) & (nk > 0)
    ratio = nu[both] / nk[both]
    spread = float(ratio.max() / ratio.min()) if len(ratio) >= 2 else 1.0
    # The move limit guards against the one-ratio geometry (TCP's); where the ratios span the spread the
    # split is determined, and a point that moves it is a noisy point, which one cost for every event
    # predicts no better (one UDP capture: 6.6 % rms apart against 17.9 % pooled, with a cost moved by
    # 28 % when one point is left out).
    undetermined = (moved > SPLIT_MOVE_LIMIT and spread < SPLIT_RATIO_SPREAD) if n >= 4 else spread < SPLIT_RATIO_SPREAD
    if fragile:
        why += "; apart: rests on a single point"
    elif undetermined and n >= 4:
        why += f"; apart: a cost moves by {100 * moved:.0f} % with one point left out"
    elif undetermined:
        why += f"; apart: three points whose user-to-kernel event ratios span only {spread:.2f}x"
    best = "apart" if not fragile and not undetermined and rms["apart"] < rms["pooled"] else "pooled"
    return _result(best, apart, _fit(nu, nk, d, w, "pooled"), n, why)


def _result(form, apart, pooled, n, why):
    c = apart if form == "apart" else pooled
    if c is None:
        return None, None, f"no probe cost ({n} points: {why})", form
    if form == "apart":
        return c[0], c[1], f"user and kernel events apart ({n} points: {why})", form
    return c[0], c[1], f"one cost per event ({n} points: {why})", form


def _user_alone(per):
    """What one user event costs with no kernel event recorded (user-only minus untraced p50 over the
    user events on the path), for the record: the correction charges the traced runs' costs."""
    per = {k: p for k, p in per.items() if p.get("d_user_ns") is not None}
    if not per:
        return None        # no user-only runs (capture --user-only-runs makes them)
    nu = np.array([p["path_events_per_call"]["ust"] for p in per.values()], float)
    du = np.array([p["d_user_ns"] for p in per.values()], float)
    return _per_event(nu, du, _weights(per, "d_user"))


def _per_event(n, d, w):
    """The weighted least-squares cost of one event for differences d over n events each; None without
    events."""
    return float((w * d) @ n / ((w * n) @ n)) if n @ n else None
