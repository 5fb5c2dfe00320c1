"""The probe effect where it is measured: the effective cost of one event of each class on the
round-trip path, from the capture's in-situ calibration.

Every case of the capture ran, in each of its rounds, untraced, with user events only and with user
and kernel events (collectors/capture.py sweeps), between the testbed's hosts with the run's
placement, and kept the traces of its kept round's traced run. Here the round-trip path of every
call of those traces is walked (analysis/rtp.py) and the events on it counted per class: user,
kernel network device (one per packet per device), other kernel (syscalls, scheduler, softirq).
Then, with the p50 differences of a case d_user = user-only - untraced and d_kernel = user+kernel -
user-only (medians of the rounds in the kept round's speed level: case_point),

    d_user   = n_user x c_user                          (least squares over the cases), or
             = n_user x c_user + size x c_byte          (a cost per payload byte too)
    d_kernel = n_kernel x c_kernel                      (one pooled cost), or
             = n_net x c_net + n_other x c_other        (net and other apart), or
             = a + n_kernel x b                         (a cost per call and one per event)

one set of costs per transport (TCP's calls slow down less under tracing than UDP's with about as
many events). Each point weighs 1 / noise^2, its noise the spread of the case's own rounds in the
kept round's speed level (point_noise): a case whose rounds caught a burst of host noise must not
set the costs the others are corrected with; nor may a held-out size (capture --holdout) set any. A case is corrected with the costs solved from the other cases of its transport
(leave one out), so its corrected RTT is a prediction; the model those costs take is the one chosen
over every case of the transport (solve_cases). Of the three kernel models, solve() keeps the
one that best predicts each point from the others and that no single point carries (over TCP every
size's calls carry about the same events, so neither a split nor a per-call cost can be told from
noise there), and the result says which and why. With a per-call cost, the case's kernel events are
charged (a + b x k) / k each, k its kernel events on the path: the same total, spread over the
events, so every step and segment keeps its share. The user share's two models compete the same
way (_solve_user): with a cost per byte the case's user events are charged (c_user x n + c_byte x
size) / n each.

Those costs are what the analysis charges to the path (Case.calibration). An event off the path
costs the RTT nothing; what an event costs beyond its own instructions where the call really runs
(tracer daemons sharing the CPUs, cache effects) is folded into these costs, which the loopback
calibration (each host alone, all events on the path) cannot see. Runs made before this had a
separate calibration phase at a few sizes (calibration_in_situ.transports or its older one-transport
form); those are still read. Cached in runs/NAME/analysis/probe.json.
"""
import json

import numpy as np

PROBE_FORMAT = "rpcscope-probe/11"


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
    costs = (pr.get("cases") or {}).get(case_id) or {}
    point = next((v["points"][case_id] for v in (pr.get("transports") or {}).values()
                  if case_id in (v.get("points") or {})), None)
    k = costs.get("kernel_event_ns")
    if point is None or costs.get("ust_event_ns") is None or not k:
        return None
    ev = point["path_events_per_call"]
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
    rounds' p50s); None when fewer than half the sample could be walked."""
    n, ev, quart = _path_events(case)
    if n < PATH_SAMPLE_RPCS // 2:
        return None
    return {"transport": case.transport, "size": case.size, "rpcs_walked": n,
            "noise_ns": point_noise(untraced, rounds),
            "path_events_per_call": {"ust": ev[0], "kernel_net": ev[1], "kernel_other": ev[2]},
            "path_events_quartiles": {"ust": quart[:, 0].tolist(), "kernel_net": quart[:, 1].tolist(),
                                      "kernel_other": quart[:, 2].tolist()},
            "d_user_ns": ust - untraced, "d_kernel_ns": both - ust,
            "p50_ns": {"untraced": untraced, "ust": ust, "both": both}}


# The least noise a point is credited with, as a fraction of its untraced p50: the spread of a few
# rounds can be near zero by chance, and no point should outweigh the others by that alone.
NOISE_FLOOR = 0.005


def point_noise(untraced, rounds):
    """{"d_user", "d_kernel"}: how far a point's p50 differences move, in ns: from the half-range of
    each kind's round p50s (rounds: {"untraced", "ust", "traced": [p50 ns]}), the two kinds of a
    difference added in quadrature, at least NOISE_FLOOR of the untraced p50. A host's burst of
    noise over some rounds of one case makes that case's differences unreliable; the solvers weigh
    each point by 1 / noise^2, so such a point does not set the costs the other cases are corrected
    with (session 10: one case with rounds 12-33 % apart had pulled every UDP case's correction 3-5 %
    low)."""
    floor = NOISE_FLOOR * untraced

    def half(k):
        x = (rounds or {}).get(k) or []
        return (max(x) - min(x)) / 2 if len(x) > 1 else 0.0
    u, s, t = half("untraced"), half("ust"), half("traced")
    return {"d_user": max(floor, float(np.hypot(u, s))), "d_kernel": max(floor, float(np.hypot(s, t)))}


def _rounds(case):
    """Each kind's rounds' p50s in the kept round's speed level: a switch of the host's level between
    rounds is not noise of the kept round's differences (they come from one round, in one level)."""
    from .run import level_rounds_p50s
    return {k: level_rounds_p50s(case.meta, k) for k in ("untraced", "ust", "traced")}


def _per_case(run):
    """Every case ran, in each round, untraced, with user events only and with user and kernel events
    (collectors/capture.py sweeps): its own p50 differences and the events on its path are one point.
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
    return [c for c in run.cases if c.complete and c.meta.get("ust_only") and not c.meta.get("lossy")
            and c.has_kernel()]


def _per_case_key(run):
    key = {c.id: [c.meta["untraced"]["p50"], c.meta["ust_only"]["p50"], c.meta["traced"]["p50"], c.meta.get("pids")]
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
    p50 = {"untraced": case.meta["untraced"]["p50"], "ust": case.meta["ust_only"]["p50"],
           "traced": case.meta["traced"]["p50"]}
    level = {k: level_p50_ns(case.meta, k) for k in p50}
    if all(v is not None for v in level.values()):
        p50 = level
    return _point(case, p50["untraced"], p50["ust"], p50["traced"], _rounds(case))


def per_case_solve(run, key, points):
    """The per-case calibration from every case's point ({case id: point or None}); saved in probe.json."""
    return _save(run, key, solve_cases(points, _holdout_ids(run)))


def solve_cases(points, holdout=()):
    """{"transports": {transport: costs from every case}, "cases": {case id: costs from the other cases of
    its transport}} for points {case id: point or None}; the cases in holdout (the sizes the model
    predicts: capture --holdout) are corrected like the others but never solve another's costs nor
    choose the models, so that nothing measured at a held-out size goes into its prediction. The models
    of the kernel and user shares are the ones chosen over every case of the transport (each predicting
    every case from the others); a case's costs are then solved in those models from the other cases
    alone. Chosen anew for each case, the smallest case's (the null call's, the one with the fewest
    events) rested on points that all lie above it, where a cost per call cannot be told from a cost per
    event: its costs were extrapolated with one cost per event, its kernel share under-charged by 15 %,
    and its corrected RTT came out +8.0 and +7.5 % above the untraced one on two ftrace captures of
    session 13 (+3.2 and +5.9 % with the transport's model; tests/python/test_probe.py)."""
    points = {cid: pt for cid, pt in points.items() if pt}
    out = {"transports": {}, "cases": {}}
    for transport in sorted({p["transport"] for p in points.values()}):
        pts = {cid: p for cid, p in points.items() if p["transport"] == transport}
        solvers = {cid: p for cid, p in pts.items() if cid not in holdout}
        forms = None
        if len(solvers) >= 2:
            every = out["transports"][transport] = _costs(solvers, "in-situ, every case" + (
                " but the held-out ones" if len(solvers) < len(pts) else ""), transport)
            forms = {"kernel": every["kernel_form"], "user": every["user_form"]}
        for cid in pts:
            others = {k: v for k, v in solvers.items() if k != cid}
            if len(others) >= 2:
                out["cases"][cid] = dict(_costs(others, "in-situ, the other cases", transport, target=pts[cid],
                                                forms=forms),
                                         points=None, solved_from=sorted(others))
    return out


def _costs(points, source, transport, target=None, forms=None):
    """The costs solved from points; target: the point of the case they will correct (its path events
    set its per-event kernel cost when a per-call kernel cost is part of the model); forms: the models
    of the kernel and user shares to solve (solve)."""
    c_user, c_net, c_other, method, per_call, used = solve_with_forms(points, target, forms)
    out = {"source": source, "transport": transport, "method": method, "points": points,
           "kernel_form": used["kernel"], "user_form": used["user"],
           "ust_event_ns": round(c_user, 1) if c_user is not None else None,
           "kernel_event_ns": {"net": round(c_net, 1), "other": round(c_other, 1)} if c_net is not None else None}
    if per_call is not None:
        out["kernel_per_call_ns"], out["kernel_per_event_ns"] = (round(v, 1) for v in per_call)
    return out


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
    """Per point 1 / noise^2 of its difference `key` ("d_user", "d_kernel"; point_noise), scaled to a
    mean of 1; every point 1 where a point has no noise recorded."""
    noise = [(p.get("noise_ns") or {}).get(key) for p in per.values()]
    if not noise or any(not x for x in noise):
        return np.ones(len(noise))
    w = 1.0 / np.square(np.array(noise, float))
    return w / w.mean()


def _wlstsq(X, y, w):
    """Weighted least squares: rows scaled by sqrt(w)."""
    r = np.sqrt(w)
    return np.linalg.lstsq(X * r[:, None], y * r, rcond=None)[0]


def _wrms(errors, w):
    """The weighted root mean square of relative errors, in %: a noisy point's miss counts less."""
    e = np.array(errors, float)
    return 100 * float(np.sqrt(np.sum(w * e * e) / np.sum(w))) if len(e) else 0.0


def _separate(A, dk, w):
    """Least-squares (c_net, c_other) for kernel differences dk of points with (net, other) events A,
    weighted by w; None when the two are not separable or a cost comes out non-positive."""
    if len(A) < 2 or abs(np.linalg.det(A.T @ (A * w[:, None]))) <= 1e-9:
        return None
    sol = _wlstsq(A, dk, w)
    return (float(sol[0]), float(sol[1])) if sol.min() > 0 else None


def _pooled(A, dk, w):
    """One weighted least-squares cost for every kernel event."""
    nk = A.sum(axis=1)
    return float((w * dk) @ nk / ((w * nk) @ nk)) if nk @ nk else None


def _per_call(A, dk, w):
    """Least-squares (a, b) of d_kernel = a + b x kernel events: a kernel-tracing cost per call that
    no recorded event carries (every syscall of a traced task takes the slow path while syscall
    tracepoints exist; filters reject other tasks' and devices' events after they fire) and one per
    event. None unless the points hold at least three distinct event counts, and a and b are
    positive."""
    nk = A.sum(axis=1)
    if len(np.unique(nk)) < 3:
        return None
    X = np.stack([np.ones(len(nk)), nk], axis=1)
    a, b = _wlstsq(X, dk, w)
    return (float(a), float(b)) if a > 0 and b > 0 else None


def _user_per_byte(nu, size, du, w):
    """Least-squares (c, e) of d_user = c x user events + e x payload bytes: a user event costs more the
    more data the call moves (the tracer's ring-buffer writes displace the payload from the caches:
    over TCP every size has 33 user events on its path, yet d_user grew from 6.9 us at 0 bytes to 8.0 us
    at 24096 here). None unless the points hold three distinct sizes, and c and e are positive."""
    if len(np.unique(size)) < 3:
        return None
    c, e = _wlstsq(np.stack([nu, size], axis=1), du, w)
    return (float(c), float(e)) if c > 0 and e > 0 else None


def _solve_user(per, target, form=None):
    """(c_user, description, per_byte) for the user share: one cost per event, or per event plus per
    payload byte (_user_per_byte) when that predicts a left-out point better and no single point
    carries it; form "event" or "byte": that one where the points determine it (chosen by the
    caller). With per_byte, c_user is the target's effective cost of one event ((c x n + e x size)
    / n, n its user events on the path; without a target, c)."""
    nu = np.array([p["path_events_per_call"]["ust"] for p in per.values()], float)
    du = np.array([p["d_user_ns"] for p in per.values()], float)
    size = np.array([p["size"] for p in per.values()], float)
    w = _weights(per, "d_user")
    per_event = lambda m: float((w[m] * du[m]) @ nu[m] / ((w[m] * nu[m]) @ nu[m])) if nu[m] @ nu[m] else None  # noqa: E731
    c_user = per_event(np.ones(len(nu), bool))
    both = _user_per_byte(nu, size, du, w)
    n = len(per)
    if form == "event" or (form == "byte" and both is not None):
        return _user_result(c_user, both if form == "byte" else None, target,
                            "the model chosen over every case of the transport")
    if both is None or n < 4:
        return c_user, "user: one cost per event", None
    err = {"event": [], "byte": []}
    for i in range(n):
        m = np.arange(n) != i
        c, b = per_event(m), _user_per_byte(nu[m], size[m], du[m], w[m])
        if b is None:
            return c_user, "user: one cost per event (a cost per byte rests on a single point)", None
        for k, pred in (("event", (c or 0.0) * nu[i]), ("byte", b[0] * nu[i] + b[1] * size[i])):
            err[k].append((pred - du[i]) / du[i] if du[i] else 0.0)
    rms = {k: _wrms(v, w) for k, v in err.items()}
    cv = f"a left-out point's user share predicted within {rms['event']:.1f} % rms per event, {rms['byte']:.1f} % with a cost per byte"
    return _user_result(c_user, both if rms["byte"] < rms["event"] else None, target, cv)


def _user_result(c_user, both, target, why):
    """_solve_user's answer: one cost per event (both None), or per event and per byte (both = (c, e))."""
    if both is None:
        return c_user, f"user: one cost per event ({why})", None
    k = target["path_events_per_call"]["ust"] if target else 0
    eff = (both[0] * k + both[1] * target["size"]) / k if k else both[0]
    return eff, (f"user: a cost per event ({both[0]:.1f} ns) and per payload byte ({both[1] * 1000:.1f} ps) ({why})"), both


def solve(per, target=None, forms=None):
    """(c_user, c_net, c_other, method, per_call): the user share by _solve_user, the kernel share by
    solve_kernel (the two descriptions joined in method). forms: {"kernel": "pooled" | "apart" |
    "per call", "user": "event" | "byte"}, the models to solve where the points can (per_case_solve
    passes those chosen over every case of the transport); None: each chosen here."""
    return solve_with_forms(per, target, forms)[:5]


def solve_with_forms(per, target=None, forms=None):
    """solve's answer and, last, the models it used: {"kernel": ..., "user": ...}."""
    forms = forms or {}
    c_user, user_method, per_byte = _solve_user(per, target, forms.get("user"))
    c_net, c_other, method, per_call, kernel_form = solve_kernel(per, target, forms.get("kernel"))
    return c_user, c_net, c_other, f"{method}; {user_method}", per_call, \
        {"kernel": kernel_form, "user": "event" if per_byte is None else "byte"}


def solve_kernel(per, target=None, form=None):
    """The kernel share's costs: (c_net, c_other, method, per_call, form) from {point: {"path_events_per_call":
    {"kernel_net", "kernel_other"}, "d_kernel_ns"}}; see the module docstring. per_call:
    (a, b) when the kernel share is a per-call cost a plus b per event, else None; the kernel costs
    returned are then the effective cost of one event of the target point ((a + b x k) / k, k its
    kernel events; without a target, b). form ("pooled", "apart", "per call"): solve that model
    where the points determine it; else (None, or not solvable here) the model is chosen here.

    Three models of the kernel share compete: one pooled cost per event; net and other events apart;
    the pooled cost plus a cost per call. With three points or more each predicts every point from
    the others, and the one with the smallest error is kept. Net and other apart, or a per-call cost,
    only if no single point carries it (without any one point, it must still be solvable). Over TCP
    every size's path has about the same events (12 or 14 net, 14 other), and a split solved from
    them follows the noise of the one or two points that differ (a case corrected with net 605 ns and
    other 106 ns missed its untraced p50 by 12 %); over UDP a cost per event alone under-corrects the
    calls with the fewest events (null: its own 403 ns an event against 347 ns solved from the other
    sizes, s5-c)."""
    A = np.array([[p["path_events_per_call"]["kernel_net"], p["path_events_per_call"]["kernel_other"]]
                  for p in per.values()], float).reshape(-1, 2)
    dk = np.array([p["d_kernel_ns"] for p in per.values()], float)
    w = _weights(per, "d_kernel")
    n = len(per)
    sep, pooled, call = _separate(A, dk, w), _pooled(A, dk, w), _per_call(A, dk, w)
    if (form == "apart" and sep is not None) or (form == "per call" and call is not None) or form == "pooled":
        return _kernel_result(form, sep, pooled, call, target, n, "the model chosen over every case of the transport")
    if sep is None and call is None:
        return pooled, pooled, \
            f"one kernel cost ({n} points): net and other had no positive separate solution", None, "pooled"
    if n < 3:
        if sep is None:
            return pooled, pooled, f"one kernel cost ({n} points)", None, "pooled"
        return sep[0], sep[1], f"{n} points: net and other kernel events solved separately", None, "apart"
    err = {"apart": [], "pooled": [], "per call": []}
    fragile = {"apart": sep is None, "per call": call is None}     # rests on one point (or not solvable)
    for i in range(n):
        m = np.arange(n) != i
        s, p, c = _separate(A[m], dk[m], w[m]), _pooled(A[m], dk[m], w[m]), _per_call(A[m], dk[m], w[m])
        fragile["apart"] |= s is None
        fragile["per call"] |= c is None
        pred_p = A[i].sum() * p if p is not None else 0.0
        pred_s = A[i] @ np.array(s) if s is not None else pred_p
        pred_c = c[0] + c[1] * A[i].sum() if c is not None else pred_p
        for k, pred in (("apart", pred_s), ("pooled", pred_p), ("per call", pred_c)):
            err[k].append((pred - dk[i]) / dk[i] if dk[i] else 0.0)
    rms = {k: _wrms(v, w) for k, v in err.items()}
    cv = (f"a left-out point's kernel share predicted within {rms['pooled']:.1f} % rms pooled, "
          f"{rms['apart']:.1f} % apart, {rms['per call']:.1f} % with a cost per call")
    usable = ["pooled"] + [k for k in ("apart", "per call") if not fragile[k]]
    best = min(usable, key=lambda k: rms[k])
    note = "" if len(usable) == 3 else "; " + ", ".join(
        f"{k}: rests on a single point" for k in ("apart", "per call") if k not in usable)
    return _kernel_result(best, sep, pooled, call, target, n, cv + note)


def _kernel_result(form, sep, pooled, call, target, n, why):
    """solve_kernel's answer for the kernel model `form` ("apart", "per call" or "pooled"), form last."""
    if form == "apart":
        return sep[0], sep[1], f"{n} points: net and other kernel events solved separately ({why})", None, form
    if form == "per call":
        k = sum(target["path_events_per_call"][x] for x in ("kernel_net", "kernel_other")) if target else 0
        c = (call[0] + call[1] * k) / k if k else call[1]
        return c, c, (f"a kernel cost per call ({call[0]:.0f} ns) and per event ({call[1]:.1f} ns), "
                      f"{n} points ({why})"), call, form
    return pooled, pooled, f"one kernel cost ({n} points): {why}", None, "pooled"
