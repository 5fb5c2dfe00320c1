"""What one more thing recorded adds to each kernel-only interval: a capture's extra kernel-only runs
beside its untraced build's kernel-only runs (RUN/kernelonly/), case by case and round by round
(`rpcscope capture --turns --kernel-only-runs` with the flags below; `rpcscope crosscheck RUN`).

    user +    RUN/kernelonly-traced/ (--kernel-only-traced-runs) less RUN/kernelonly/: the traced
              build, its user tracepoints recording, under the same kernel events
    kernel +  RUN/kernelonly-doubled/ (--kernel-only-doubled-runs) less RUN/kernelonly/: the untraced
              build, every kernel event recorded a second time (collectors/target.py
              KernelOnlyRecording copies=2)

Each K step's stretch is the other run's median less the kernel-only run's, in the kept round, with
every round's difference beside it. A kernel event bounds the intervals on either side of it, and its
recording (ring reserve, clock read, copy, commit) runs partly before and partly after the clock read
that timestamps it. The kernel-only analysis charges each event to one interval (its events_mean,
analysis/kernelonly.py step 6) and corrects the interval by the events it charges it. kernel + divided
by those events, interval by interval, is what one more recording of a charged event adds to its own
interval: where that figure is the same in every interval, the charge in place is where the recording's
cost lands; an interval charged no event that still stretches holds cost that landed outside its events'
own intervals.
"""
import statistics

import numpy as np

from rpcscope.tracepoints import SEGMENT_UNITS
from rpcscope.tracepoints.targetsteps import kernel_steps

_PATH = {k.id for k in kernel_steps() if k.rtp}      # K1..K11: one exchange's round trip, end to end
# The intervals from a device's hand-off to the receiving device (K2, K8): the catalog's network unit.
_NETWORK = {k.id for k in kernel_steps() if set(k.dce) & set(SEGMENT_UNITS.values())}

# The extra runs: kind -> (the other run's name in the rows' and cases' fields)
KINDS = {"user": "traced_build", "kernel": "doubled"}


def median(xs):
    """The median of the figures that are there, None if none is."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def add_rows(rows, kind, other_kept, other_rounds, ko_rounds, events=None):
    """Add to each row (analysis/crosscheck.py _row) the other run's kernel-only median in the kept round
    and the stretch, KIND_stretch_us (its median less the kernel-only run's), with every round's
    (KIND_stretch_rounds_us). other_kept: {step: [ns per call]} of the kept round; other_rounds, ko_rounds:
    [(summary, {step: [ns per call]})] of each round, each run. events: {step: the kernel-only run's mean
    charged events a call} (kernel: each row's stretch per event, kernel_stretch_per_event_ns)."""
    field = f"kernel_only_{KINDS[kind]}_p50_us"
    oth = {int(s.get("round", 1)): p for s, p in other_rounds}
    ko = {int(s.get("round", 1)): p for s, p in ko_rounds}
    for r in rows:
        o = median(other_kept.get(r["step"], []))
        r[field] = None if o is None else round(o / 1e3, 3)
        base = r["kernel_only_p50_us"]
        r[f"{kind}_stretch_us"] = None if o is None or base is None else round(o / 1e3 - base, 3)
        per = []
        for k in sorted(set(oth) & set(ko)):
            a, b = median(oth[k].get(r["step"], [])), median(ko[k].get(r["step"], []))
            per.append(None if a is None or b is None else round((a - b) / 1e3, 3))
        r[f"{kind}_stretch_rounds_us"] = per
        if events is not None:
            n, s = events.get(r["step"]), r[f"{kind}_stretch_us"]
            r["events_per_call"] = n
            r[f"{kind}_stretch_per_event_ns"] = round(1e3 * s / n, 1) if n and s is not None else None


def case_figures(case, rows, kind, other_summary):
    """Add to a case the other run's case and program p50, and KIND_stretch over K1..K11 and on the
    program's RTT p50; for kernel, the stretch per charged event over K1..K11, its range over the intervals,
    and the stretch of the intervals charged none."""
    p50 = (other_summary or {}).get("program_p50_us")
    case[f"{KINDS[kind]}_case"] = (other_summary or {}).get("case")
    case[f"{KINDS[kind]}_program_p50_us"] = p50
    base = case["kernel_only_program_p50_us"]
    case[f"{kind}_stretch_program_us"] = None if p50 is None or base is None else round(p50 - base, 3)
    path = [r for r in rows if r["step"] in _PATH]
    vals = [r[f"{kind}_stretch_us"] for r in path]
    case[f"{kind}_stretch_path_us"] = None if None in vals or not vals else round(sum(vals), 3)
    if kind == "kernel" and case["kernel_stretch_path_us"] is not None:
        evs = sum(r.get("events_per_call") or 0.0 for r in path)
        per = [r["kernel_stretch_per_event_ns"] for r in path if (r.get("events_per_call") or 0) >= 0.5
               and r["kernel_stretch_per_event_ns"] is not None]
        none = [r["kernel_stretch_us"] for r in path if (r.get("events_per_call") or 0) < 0.5]
        case["kernel_stretch_events_per_call"] = round(evs, 2)
        case["kernel_stretch_per_event_ns"] = round(1e3 * case["kernel_stretch_path_us"] / evs, 1) if evs else None
        case["kernel_stretch_per_event_range_ns"] = [min(per), max(per)] if per else None
        case["kernel_stretch_eventless_us"] = round(sum(none), 3) if none else None


def placement(cases, kind):
    """Where the stretch lands, over every single-exchange case's K1..K11 intervals but the network ones and
    every round (KIND_stretch_rounds_us): least squares of an interval's stretch on what it is charged (kernel:
    the kernel-only analysis's events a call; user: the traced build's user marks in its counterpart) and on its
    time (the kernel-only median),

        stretch = in place x charged + spread x time,

    both terms costs, so neither below zero: where the free fit puts one there, it is held at zero and the
    other fitted alone (held_at_zero names it). With the share of the variance each explains alone and both
    together (r2), and the network intervals' stretch per charged event apart: a hand-off holds the bridge's
    two hops (collectors/target.py), whose events a capture without them in its device filter does not
    charge. None without the stretch or with fewer than three points."""
    charged = "events_per_call" if kind == "kernel" else "marks"
    pts, net = [], []
    for c in cases:
        if c.get("exchanges_per_call", 1) > 1.05 or f"{kind}_stretch_path_us" not in c:
            continue
        for r in c["rows"]:
            n, t = r.get(charged), r.get("kernel_only_p50_us")
            if r["step"] not in _PATH or n is None or t is None:
                continue
            for x in r.get(f"{kind}_stretch_rounds_us") or ():
                if x is not None:
                    (net if r["step"] in _NETWORK else pts).append((float(n), t, x))
    if len(pts) < 3:
        return None
    a = np.array(pts)
    y = a[:, 2]
    var = float(((y - y.mean()) ** 2).sum())

    def fit(cols):
        coef, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
        res = y - a[:, cols] @ coef
        return coef, (1 - float((res ** 2).sum()) / var) if var else None

    (in_place, spread), r2 = fit([0, 1])
    charged_alone, time_alone = fit([0]), fit([1])
    held = []
    if min(in_place, spread) < 0:
        # The best fit with both terms at or above zero: one of them held at zero, the other fitted alone
        # (of the two, the feasible one that explains more).
        alone = [(k, c[0], r) for k, (c, r) in ((0, charged_alone), (1, time_alone)) if c[0] >= 0]
        k, c, r2 = max(alone, key=lambda x: x[2] if x[2] is not None else -1.0) if alone else (None, 0.0, 0.0)
        in_place, spread = (c, 0.0) if k == 0 else (0.0, c) if k == 1 else (0.0, 0.0)
        held = ["in place", "spread"] if k is None else ["spread"] if k == 0 else ["in place"]
    per_net = [x / n for n, _, x in net if n]
    return {"points": len(pts), "in_place_ns_per_charged": round(1e3 * float(in_place), 1),
            "spread_per_us_of_time": round(float(spread), 4), "held_at_zero": held, "r2": _r(r2),
            "r2_charged_alone": _r(charged_alone[1]), "r2_time_alone": _r(time_alone[1]),
            "network_ns_per_charged": round(1e3 * statistics.median(per_net), 1) if per_net else None,
            "network_points": len(per_net)}


def _r(v):
    return None if v is None else round(v, 3)


def shared_price(fit):
    """The price both sides of the cross-check take a charged kernel event off at, from the kernel + fit
    (placement("kernel")): {"in_place_ns", "spread", "r2"}, or {"why": ...} where the capture has no such
    fit or it puts nothing in place."""
    if not fit:
        return {"why": "the capture has no kernel-only runs with every kernel event recorded twice "
                       "(capture --kernel-only-doubled-runs)"}
    if fit["in_place_ns_per_charged"] <= 0:
        return {"why": f"the doubled runs' fit puts no cost in place ({fit['in_place_ns_per_charged']:.0f} ns, "
                       f"{100 * fit['spread_per_us_of_time']:.1f} % spread, r2 {fmt(fit['r2'])})"}
    return {"in_place_ns": fit["in_place_ns_per_charged"], "spread": fit["spread_per_us_of_time"], "r2": fit["r2"]}


def place(row, price):
    """Each side of a row less what its charged kernel events cost there at the shared price: their number
    (the kernel-only analysis's events_per_call, the traced analysis's traced_kernel_events_per_call) in
    place, and the spread share of the side's own time. Both record their kernel events with one tracer
    (tracefs), so the same event costs both the same; the traced build's user tracepoints are charged where
    they are (marks), and the rows both bound hold none. Sets kernel_only_placed_p50_us,
    traced_placed_p50_us and placed_diff_% (None where a figure or the price is missing)."""
    n_ko, n_tr = row.get("events_per_call"), row.get("traced_kernel_events_per_call")
    ko, tr = row["kernel_only_p50_us"], row["traced_p50_us"]
    out = {"kernel_only_placed_p50_us": None, "traced_placed_p50_us": None, "placed_diff_%": None}
    if "in_place_ns" in price and None not in (n_ko, n_tr, ko, tr) and not row.get("marks"):
        def less(t, n):
            return round(t - n * price["in_place_ns"] / 1e3 - price["spread"] * t, 3)
        a, b = less(ko, n_ko), less(tr, n_tr)
        out = {"kernel_only_placed_p50_us": a, "traced_placed_p50_us": b,
               "placed_diff_%": round(100 * (a - b) / b, 1) if b else None}
    row.update(out)


def render_placement(fits):
    """The lines of the placement fits ({kind: placement's dict or None})."""
    what = {"kernel": "kernel + (per kernel event the kernel-only analysis charges the interval)",
            "user": "user + (per user mark in the interval's traced counterpart)"}
    lines = []
    for kind, p in fits.items():
        if p:
            lines.append(f"where {what[kind]} lands, over {p['points']} interval-rounds (K1..K11 less the network, "
                         f"single-exchange cases): {p['in_place_ns_per_charged']:.0f} ns in place a charged one, "
                         f"{100 * p['spread_per_us_of_time']:.1f} % of the interval's time spread"
                         + (f" ({' and '.join(p['held_at_zero'])} held at zero: the free fit put it below)"
                            if p.get("held_at_zero") else "")
                         + f" (r2 {fmt(p['r2'])}; in place alone {fmt(p['r2_charged_alone'])}, spread alone "
                         f"{fmt(p['r2_time_alone'])})"
                         + (f"; the network intervals {p['network_ns_per_charged']:.0f} ns a charged one"
                            if p["network_ns_per_charged"] is not None else ""))
    return lines


def render_price(price):
    """The line of the shared price (shared_price's dict)."""
    if "in_place_ns" not in price:
        return f"shared price: none ({price['why']}); the verdict is on each side's own correction"
    return (f"shared price: {price['in_place_ns']:.0f} ns a charged kernel event in place and "
            f"{100 * price['spread']:.1f} % of the step's time (the doubled runs' fit above), taken off both sides")


def add_user_measured(rows, differs, agrees):
    """Where both analyses correct a step: what the traced correction takes off (traced_correction_us),
    and what it would take off measured: the kernel-only correction, for the same kernel events, plus
    what the user tracepoints add to the step (traced_correction_measured_us); a differing row of one
    mode says so."""
    for r in rows:
        ko, ko_c, tr_c = r["kernel_only_p50_us"], r["kernel_only_corrected_p50_us"], r["traced_corrected_p50_us"]
        if r["verdict"] in (agrees, differs) and None not in (ko_c, tr_c, r["user_stretch_us"], r["traced_p50_us"]):
            r["traced_correction_us"] = round(r["traced_p50_us"] - tr_c, 3)
            r["traced_correction_measured_us"] = round(ko - ko_c + r["user_stretch_us"], 3)
            one_mode = all(len((r.get(k) or {}).get("modes") or ()) <= 1 for k in ("kernel_only_modes", "traced_modes"))
            if r["verdict"] == differs and r["verdict_on"] == "corrected" and one_mode:
                r["why"] += (f"; the user tracepoints add {r['user_stretch_us']:.2f} us to the step (the traced "
                             f"build's kernel-only run), so the traced correction would take off "
                             f"{r['traced_correction_measured_us']:.2f} us")


def render_case(c):
    """The lines a case's stretches add under its heading."""
    f = fmt
    lines = []
    if "user_stretch_path_us" in c:
        lines.append(f"  user +: the traced build's kernel-only run {c['traced_build_case']} less this one, us (the "
                     f"same kernel events; what the user tracepoints add): {f(c['user_stretch_path_us'])} over "
                     f"K1..K11, {f(c['user_stretch_program_us'])} on the program's RTT p50")
    if "kernel_stretch_path_us" in c:
        lines.append(f"  kernel +: the kernel-only run {c['doubled_case']} with every kernel event recorded "
                     f"twice less this one, us: {f(c['kernel_stretch_path_us'])} over K1..K11, "
                     f"{f(c['kernel_stretch_program_us'])} on the program's RTT p50")
        if c.get("kernel_stretch_per_event_ns") is not None:
            rng = c["kernel_stretch_per_event_range_ns"]
            lines.append(f"    {f(c['kernel_stretch_per_event_ns'], 0)} ns for each of the "
                         f"{f(c['kernel_stretch_events_per_call'])} events a call the kernel-only analysis charges to "
                         f"K1..K11" + (f"; by interval {rng[0]:.0f} to {rng[1]:.0f} ns an event" if rng else "")
                         + (f"; {f(c['kernel_stretch_eventless_us'])} us in the intervals charged none"
                            if c["kernel_stretch_eventless_us"] is not None else ""))
    return lines


def fmt(v, nd=2):
    """A figure for a table: '-' where there is none."""
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)
