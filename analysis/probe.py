"""The probe effect where it is measured: the effective cost of one event of each class on the
round-trip path, from the capture's in-situ calibration.

Every case of the capture ran, in each of its rounds, untraced and with user and kernel events (and,
with capture --user-only-runs, with user events only: collectors/capture.py sweeps), between the
testbed's hosts with the run's placement, and kept the traces of its kept round's traced run. Here
the round-trip path of every call of those traces is walked (analysis/rtp.py) and the events on it
counted per class: user, kernel network device (one per packet per device), other kernel (syscalls,
scheduler, softirq). Then, with a case's probe effect d = user+kernel - untraced p50 (medians of the
rounds in the kept round's speed level: case_point),

    d = (n_user + n_kernel) x c                 (one cost for every event), or
      = n_user x c_user + n_kernel x c_kernel   (user and kernel events apart)

least squares over the cases of a transport (solve). User-only runs do not enter: a user event costs
more beside recorded kernel events than alone (~200 against ~140 ns over UDP; where the capture made
them, probe.json keeps the cost alone as `ust_alone_event_ns`), and the correction removes what the
traced run carries. Each point weighs 1 / noise^2, its noise the spread of the case's own rounds in
the kept round's speed level (point_noise): a case whose rounds caught a burst of host noise must
not set the costs the others are corrected with; nor may a held-out size (capture --holdout) set
any. A case is corrected with the costs solved from the other cases of its transport (leave one
out), so its corrected RTT is a prediction; the model those costs take is the one chosen over every
case of the transport (solve_cases).

Where the capture ran the clock build in every round (capture --clock-reads, session 30), a case's
costs are then scaled so that its path's events add up to its probe effect anchored on those runs, its
traced minus clock-build p50 plus the clock reads' small cost (_anchor_on_clock); and every case's
costs are taken from its level to its kept round (_as_the_kept_round_carries_it).

Those costs are what the analysis charges to the path (Case.calibration). An event off the path
costs the RTT nothing; what an event costs beyond its own instructions where the call really runs
(tracer daemons sharing the CPUs, cache effects) is folded into these costs, which the loopback
calibration (each host alone, all events on the path) cannot see. Runs made before this had a
separate calibration phase at a few sizes (calibration_in_situ.transports or its older one-transport
form); those are still read. Cached in runs/NAME/analysis/probe.json.
"""
import json

import numpy as np

PROBE_FORMAT = "rpcscope-probe/18"


def in_situ(run):
    """{"transports": {transport: costs}, "cases": {case id: costs}} where costs = {"source": "in-situ",
    "ust_event_ns", "kernel_event_ns": {"net", "other"}, "method", ...}; {} when the run has no usable
    in-situ calibration (the manifest's loopback calibration is used then). Cached in
    runs/NAME/analysis/probe.json."""
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


def _scale_costs(costs, f):
    """Every event cost in costs times f (in place), to 0.1 ns."""
    costs.update(ust_event_ns=round(costs["ust_event_ns"] * f, 1),
                 kernel_event_ns={k: round(v * f, 1) for k, v in costs["kernel_event_ns"].items()})


def _path_cost(ev, costs):
    """What events per class on a path ({"ust", "kernel_net", "kernel_other"}) cost at costs (a cost
    below zero counts nothing)."""
    k = costs["kernel_event_ns"]
    return (ev["ust"] * max(0.0, costs["ust_event_ns"]) + ev["kernel_net"] * max(0.0, k["net"])
            + ev["kernel_other"] * max(0.0, k["other"]))


def _cached(run, key):
    try:
        got = json.loads((run.out_dir / "probe.json").read_text())
    except (OSError, ValueError):
        return None
    if got.get("format") == PROBE_FORMAT and got.get("key") == key:
        return {"transports": got["transports"], "cases": got["cases"]}
    return None


def _save(run, key, out):
    run.out_dir.mkdir(parents=True, exist_ok=True)
    (run.out_dir / "probe.json").write_text(json.dumps({"format": PROBE_FORMAT, "key": key, **out}, indent=1,
                                                       default=float) + "\n")
    return out


# RPCs walked per case: the events on a case's path are the same in nearly every call (on this VM's
# captures the 25th and 75th percentiles of each class equal the median), so an evenly spaced sample
# gives the median of all of them; the point records the sample's quartiles to show it.
PATH_SAMPLE_RPCS = 32


def _path_events(case):
    """Events per class on the round-trip path of a case's clean RPCs, over an evenly spaced sample:
    (n RPCs walked, median [user, net, other], [25th, 75th percentile])."""
    from .rtp import analyze_case
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
    without user-only runs (the default since session 21): the point then has only d_total_ns."""
    n, ev, quart = _path_events(case)
    if n < PATH_SAMPLE_RPCS // 2:
        return None
    split = ust is not None
    from .run import path_shape
    return {"transport": case.transport, "size": case.size, "rpcs_walked": n,
            "untraced_path": path_shape(case.meta), "other_path_rows": _other_path_rows(case),
            "noise_ns": point_noise(untraced, rounds),
            "path_events_per_call": {"ust": ev[0], "kernel_net": ev[1], "kernel_other": ev[2]},
            "path_events_quartiles": {"ust": quart[:, 0].tolist(), "kernel_net": quart[:, 1].tolist(),
                                      "kernel_other": quart[:, 2].tolist()},
            "d_total_ns": both - untraced, "d_user_ns": ust - untraced if split else None,
            "d_kernel_ns": both - ust if split else None,
            "p50_ns": {"untraced": untraced, "ust": ust, "both": both}}


def _other_path_rows(case):
    """{"ns", "wakeups"}: what the model's other-path rows add at this case (model.other_path_cost: the
    wake-ups the median untraced call pays beyond the traced run, at the capture's calibrated costs), or
    None where they add nothing or cannot be costed."""
    from .model import other_path_cost
    from .run import other_path_counts
    from .wakeup import run_wake_costs
    run = getattr(case, "run", None)
    got = other_path_cost(other_path_counts(case.meta), run_wake_costs(run.manifest if run else None))
    if not got or not got[1]:
        return None
    return {"ns": round(got[0] * 1000.0, 1), "wakeups": got[1]}


# The least noise a point is credited with, as a fraction of its untraced p50: the spread of a few
# rounds can be near zero by chance, and no point should outweigh the others by that alone.
NOISE_FLOOR = 0.005


def point_noise(untraced, rounds):
    """{"d_total", "d_user", "d_kernel"}: how far a point's p50 differences (user+kernel - untraced,
    user-only - untraced, user+kernel - user-only) move, in ns: from the half-range of each kind's round
    p50s (rounds: {"untraced", "ust", "traced": [p50 ns]}), the two kinds of a difference added in
    quadrature, at least NOISE_FLOOR of the untraced p50. A host's burst of noise over some rounds of
    one case makes that case's differences unreliable; the solver weighs each point by 1 / noise^2, so
    such a point does not set the costs the other cases are corrected with (session 10: one case with
    rounds 12-33 % apart had pulled every UDP case's correction 3-5 % low).
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
    """Half the spread of a kind's round p50s in the level: 0 where the capture made no rounds (before
    session 14: every point alike at the floor), None where one round ran in the level (unknown: a
    spread of nought is no evidence of quiet, and such a point weighed as the least noisy there could
    be set every other case's cost per clock mark in runs/run-20261127-152809, MODEL.md session 31)."""
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
    from .run import level_rounds_p50s
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
                  c.meta.get("pids"), c.meta.get("sleeps_per_call"), _kept_clock_p50(c.meta)]
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
    """A case's calibration point (_point), or None; walked before any calibration exists. Its p50s are
    the medians of each kind's rounds in the kept round's speed level (run.level_p50_ns), where every kind
    has them: the events on the path come from the kept traced run, but how much they cost is a property
    of the level, and one round's differences move by 1-3 % of the RTT (ust - untraced is 4-8 us). Over
    six captures of session 14, re-analysed: the model met its goals at 70 sizes of 96 against 66 with
    the kept round's differences, and the corrected traced p50 was within 5 % of the untraced one in 95
    cases against 94."""
    from .run import level_p50_ns
    p50 = {"untraced": case.meta["untraced"]["p50"], "traced": case.meta["traced"]["p50"]}
    if case.meta.get("ust_only"):
        p50["ust"] = case.meta["ust_only"]["p50"]
    clock = _kept_clock_p50(case.meta)
    if clock is not None:
        p50["clock"] = clock
    level = {k: level_p50_ns(case.meta, k) for k in p50}
    if all(v is not None for v in level.values()):
        p50 = level
    point = _point(case, p50["untraced"], p50.get("ust"), p50["traced"], _rounds(case.meta))
    if point is not None:
        point["traced_kept_p50_ns"] = case.meta["traced"]["p50"]
        if clock is not None:
            point["clock"] = _clock_point(case.meta, p50)
    return point


def _kept_clock_p50(meta):
    """The kept round's clock-build p50 (capture --clock-reads since session 30: a clock-build run in
    every round), or None where the capture made none in the rounds (before session 30, one run after
    them, in whichever level held then)."""
    rep = meta.get("repeats") or {}
    p50s, kept = rep.get("clock_p50_ns") or [], rep.get("kept_round")
    return p50s[kept] if kept is not None and kept < len(p50s) and p50s[kept] else None


def _clock_point(meta, p50):
    """A point's clock-build figures: its p50 (in the level where every kind has three rounds, as the
    point's others), the noise of its clock minus untraced difference (the
    half-ranges of the two kinds' level rounds in quadrature, at least NOISE_FLOOR of the RTT: it weighs
    the point where the cost of a mark is solved), and whether it blocked and was woken as the traced
    run (path_as_traced) and as the untraced one (path_as_untraced)."""
    from .run import same_path
    rounds = _rounds(meta, ("untraced", "clock"))
    half = [_half_range(x) for x in rounds.values()]
    sp = meta.get("sleeps_per_call") or {}
    counted = all(sp.get(k) for k in ("untraced", "clock", "traced"))
    return {"p50_ns": p50["clock"],
            "noise_ns": {"clock_minus_untraced": None if None in half else
                         max(NOISE_FLOOR * p50["untraced"], float(np.hypot(*half)))},
            "path_as_traced": same_path(sp["clock"], sp["traced"]) if counted else None,
            "path_as_untraced": same_path(sp["clock"], sp["untraced"]) if counted else None}


def per_case_solve(run, key, points):
    """The per-case calibration from every case's point ({case id: point or None}); saved in probe.json."""
    return _save(run, key, solve_cases(points, _holdout_ids(run)))


def solve_cases(points, holdout=()):
    """{"transports": {transport: costs from every case}, "cases": {case id: costs from the other cases of
    its transport}} for points {case id: point or None}; the cases in holdout (the sizes the model
    predicts: capture --holdout) are corrected like the others but never solve another's costs nor
    choose the model, so that nothing measured at a held-out size goes into its prediction. The model
    (one cost for every event, or user and kernel events apart: solve) is the one chosen over every case
    of the transport, each predicting every case from the others; a case's costs are then solved in that
    model from the other cases alone.
    Nor does a case whose untraced run blocked in other waits than its traced run, or was woken by
    interrupts where it was not (took_another_path): its traced minus untraced difference is then not
    the probes' cost but that and the other path's difference (session 24: over UDP at 8032 bytes and
    more, in the host's faster level, the untraced server slept once more per call and took 10-15 us
    longer, so the costs solved with those cases were off for every size), unless the model's
    other-path rows count that difference: it then solves with their cost added back (_as_solver;
    transports.*.other_path_cases_with_rows)."""
    points = {cid: pt for cid, pt in points.items() if pt}
    out = {"transports": {}, "cases": {}}
    for transport in sorted({p["transport"] for p in points.values()}):
        pts = {cid: p for cid, p in points.items() if p["transport"] == transport}
        solvers = {cid: _as_solver(p) for cid, p in pts.items() if cid not in holdout}
        other_path = sorted(cid for cid, p in solvers.items() if p is None)
        with_rows = sorted(cid for cid, p in solvers.items() if p is not None and p is not pts[cid])
        solvers = {cid: p for cid, p in solvers.items() if p is not None}
        if len(solvers) < 2:      # too few on the traced path to solve anything: use them all, and say so
            other_path, solvers = [], {cid: p for cid, p in pts.items() if cid not in holdout}
        form = None
        if len(solvers) >= 2:
            but = [w for w, there in (("the held-out ones", any(cid in holdout for cid in pts)),
                                      ("those whose untraced run took another path", other_path)) if there]
            every = out["transports"][transport] = _costs(solvers, "in-situ, every case" + (
                " but " + " and ".join(but) if but else "") + (
                f"; {len(with_rows)} on another path with its other-path rows added" if with_rows else ""), transport)
            every["other_path_cases"] = other_path
            every["other_path_cases_with_rows"] = with_rows
            form = every["form"]
        for cid in pts:
            others = {k: v for k, v in solvers.items() if k != cid}
            if len(others) >= 2:
                out["cases"][cid] = dict(_costs(others, "in-situ, the other cases", transport, form=form),
                                         points=None, solved_from=sorted(others))
        if CLOCK_ANCHOR:
            _anchor_on_clock(out, pts, holdout)
        if KEPT_ROUND_FACTOR:
            _as_the_kept_round_carries_it(out, pts)
    return out


def _as_the_kept_round_carries_it(out, pts):
    """Each case's costs times its kept traced run's p50 over its level's (kept_round_factor). The costs
    are a level's (solved from, or anchored on, the medians of the level's rounds), but they are charged
    on the kept round's traces, whose calls ran uniformly faster or slower than the level's median,
    probes and all, and which the model scales back to the level by the inverse (model.level_figures,
    session 19). Charged as they are, the probe effect comes out of the level's RTT that factor over or
    short: TCP 0 of runs/run-20261127-125526, a kept round 1.8 % faster than its level, 0.19 us of a
    15.1 us RTT (analysis/MODEL.md, session 30)."""
    for cid, p in pts.items():
        costs = out["cases"].get(cid)
        kept, level = p.get("traced_kept_p50_ns"), (p.get("p50_ns") or {}).get("both")
        if not _has_costs(costs) or not kept or not level:
            continue
        _scale_costs(costs, kept / level)
        costs["kept_round_factor"] = round(kept / level, 4)


# Whether each case's costs are charged as its kept round carries them (_as_the_kept_round_carries_it);
# off, as the level's, as before session 30 (for comparisons).
KEPT_ROUND_FACTOR = True


# Whether a case's probe effect is anchored on its clock-build runs where it can be (_anchor_on_clock);
# off, every case takes the other cases' per-event costs as before session 30 (for comparisons).
CLOCK_ANCHOR = True


def _anchor_on_clock(out, pts, holdout):
    """Where a case's clock-build runs (capture --clock-reads) took its traced run's path, its probe
    effect is anchored on them: the traced minus the clock build's p50, measured at that case, plus what
    the clock reads cost the call, m marks on its path (its user events) at a cost per mark solved from
    the OTHER cases' clock minus untraced p50s (leave one out, held-out sizes never solving). The case's
    per-event costs (out["cases"][cid]) are scaled so that its path's events add up to that probe effect
    (the level's: _as_the_kept_round_carries_it then takes it to the kept round's traces);
    their split between user and kernel events, and so each step's share, is the solve's. Recorded in
    out["cases"][cid]["clock_anchor"] (the scale and every figure it came from).

    Why (analysis/MODEL.md, session 30): the per-event costs of the other sizes predict a size's probe
    effect only as well as that effect is one cost per event, and over TCP in the host's faster level it
    grows with the payload (~0.4 us from 0 to 24096 bytes, of a 15-16 us RTT) though every size has the
    same events: the kernel tracer's doing (the user events alone and the clock build pay for the bytes
    as the untraced run does). The clock build pays ~25 ns a mark, and pays it alike at every size, so
    anchored the probe effect is measured where it is removed, and only that small cost is predicted.
    A case whose clock runs took another path than its traced run (woken by interrupts where it was
    not, say) keeps the other cases' costs: its traced minus clock difference would hold that path's
    cost too; nor does a case whose clock runs took another path than its untraced runs solve the cost
    per mark."""
    by = {cid: p for cid, p in pts.items() if p.get("clock")}
    solvers = {cid: p for cid, p in by.items() if cid not in holdout and p["clock"]["path_as_untraced"] is True
               and (p["untraced_path"] or {}).get("same") is not False}
    for cid, p in by.items():
        costs = out["cases"].get(cid)
        if not _has_costs(costs):
            continue
        ev = p["path_events_per_call"]
        base = _path_cost(ev, costs)
        others = {k: q for k, q in solvers.items() if k != cid}
        why = None
        if p["clock"]["path_as_traced"] is None:
            why = "the capture did not count its clock-build runs' sleeps, so their path is not known"
        elif not p["clock"]["path_as_traced"]:
            why = "its clock-build runs took another path than its traced run"
        elif len(others) < 2:
            why = "fewer than two other cases whose clock-build and untraced runs took one path"
        elif base <= 0:
            why = "no probe cost on its path to scale"
        if why:
            costs["clock_anchor"] = {"anchored": False, "why": why}
            continue
        marks = np.array([q["path_events_per_call"]["ust"] for q in others.values()], float)
        d = np.array([q["clock"]["p50_ns"] - q["p50_ns"]["untraced"] for q in others.values()], float)
        w = _inverse_variance([q["clock"]["noise_ns"]["clock_minus_untraced"] for q in others.values()])
        per_mark = _per_event(marks, d, w)
        traced_minus_clock = p["p50_ns"]["both"] - p["clock"]["p50_ns"]
        effect = traced_minus_clock + ev["ust"] * max(0.0, per_mark)
        scale = effect / base
        _scale_costs(costs, scale)
        costs["source"] += ", anchored on its clock build"
        costs["clock_anchor"] = {"anchored": True, "scale": round(scale, 4), "probe_effect_ns": round(effect, 1),
                                 "unanchored_ns": round(base, 1), "traced_minus_clock_ns": round(traced_minus_clock, 1),
                                 "clock_read_ns_per_mark": round(per_mark, 2), "marks_on_path": float(ev["ust"]),
                                 "per_mark_solved_from": sorted(others)}


# The noise an other-path case's point takes on per wake-up its rows add (_as_solver): a sleep in the
# RPC costs ~1 us more than the calibration says (analysis/MODEL.md, session 26).
ROWS_NOISE_NS = 1000.0


def _as_solver(point):
    """The point as it solves the costs: itself on the traced path; where its untraced run took another
    path whose wake-ups the model's rows count (other_path_rows), its difference with those rows' cost
    added back (the untraced p50 holds them beside the probes' cost) and its noise raised by
    ROWS_NOISE_NS per wake-up; None where the rows count nothing (the untraced p50 lies between the
    modes, or only the traced run took the interrupts) or cannot cost it.
    Why not leave every such case out, as from session 24: in the faster level UDP 8032-24096 take
    another path, and the costs solved from UDP 0-4016 alone, extrapolated to paths with 55-75 user
    events from paths with 33-49, left their corrected RTTs up to 2.5 % low; over the seven
    faster-level captures of sessions 25-26 the model met 87 of 112 sizes with them in, 75 without
    (MODEL.md, session 26)."""
    if not took_another_path(point):
        return point
    rows = point.get("other_path_rows")
    if not rows or not rows.get("wakeups"):
        return None
    noise = dict(point["noise_ns"])
    if noise["d_total"] is not None:      # unknown stays unknown: it weighs as the others' median
        noise["d_total"] = float(np.hypot(noise["d_total"], rows["wakeups"] * ROWS_NOISE_NS))
    return dict(point, d_total_ns=point["d_total_ns"] + rows["ns"], noise_ns=noise)


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
            "kernel_event_ns": {"net": round(c_kernel, 1), "other": round(c_kernel, 1)} if c_kernel is not None else None,
            "ust_alone_event_ns": round(alone, 1) if alone is not None else None}


def _calibrate(run, meta, sizes):
    """An older run's separate calibration phase: one point per calibrated size."""
    from .run import Case
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
# in runs/run-20261126-150551 (full set; TCP 2.8 % rms apart against 2.9 % pooled, a quiet 4016 weighing
# most) the user event cost 43-224 ns and the kernel event 177-406 ns as one point or another was left
# out. Each case is corrected with the costs solved without it (solve_cases), so its user steps were
# charged up to four times what the next size's were, the per-step lines through the sizes bent apart, and
# the model missed TCP 24096 by -19 % while every corrected path summed within 5 % of Measured. Where the
# split is determined (UDP: a fragment adds kernel events and no user event) it moved by 5-14 % in that
# session's captures.
SPLIT_MOVE_LIMIT = 0.25
# With three points every left-out fit solves the two costs from two points exactly, so how far it moves
# says how close those two lie, not whether the split follows noise: UDP's 0, 1392 and 4016 (the cases
# left to solve where the larger sizes took another path) differ by four kernel events between the first
# two, and their left-out splits moved by 31-35 % in runs/run-20261127-001500 and -003854, where the split
# over them had predicted a left-out point within 3.0-3.3 % rms against pooled's 4.5-6.2 %, and pooled
# then missed UDP 0-6000 by 3-12 %. There the split is kept where the points' user-to-kernel event ratios
# span at least this factor (UDP 0, 1392, 4016: 1.75; TCP's paths, one ratio: 1.06).
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
    traced minus user-only for the kernel's), as until session 20: a user event costs more where kernel
    events are recorded too. Over the ten 5000-call captures of session 19, UDP's user event came out at
    190-217 ns from the total and 128-147 ns from the user-only runs, kernel events at 271-290 ns
    against 297-330 plus a cost per call; the user-only run measured a cost the traced run does not
    have, and its own noise entered both shares with opposite signs. A left-out size's probe effect was
    predicted within 1.86 % of its RTT (rms) against 2.44 %, and the model met its goals at 153 of
    those 160 sizes against 144 (analysis/MODEL.md, session 20)."""
    nu, nk, d = _arrays(per)
    w = _weights(per, "d_total")
    n = len(d)
    apart = _fit(nu, nk, d, w, "apart")
    if form == "pooled" or (form == "apart" and apart is not None):
        return _result(form, apart, _fit(nu, nk, d, w, "pooled"), n, "the model chosen over every case of the transport")
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
    why = f"a left-out point's probe effect predicted within {rms['pooled']:.1f} % rms pooled, {rms['apart']:.1f} % apart"
    both = (nu > 0) & (nk > 0)
    ratio = nu[both] / nk[both]
    spread = float(ratio.max() / ratio.min()) if len(ratio) >= 2 else 1.0
    # The move limit guards against the one-ratio geometry (TCP's); where the ratios span the spread the
    # split is determined, and a point that moves it is a noisy point, which one cost for every event
    # predicts no better (session 28: runs/run-20261127-084613's UDP, 6.6 % rms apart against 17.9 %
    # pooled, a cost moved by 28 %; pooled missed UDP 0 by +11.7 % and 6000-24096 by -3 to -9 %).
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
