"""The kernel-only capture's probe effect: what one recorded kernel event costs a call, measured in place,
and each step's time without it.

collectors/target.py runs every case's client three times against the same servers: untraced (the
tracefs instances' events off), traced (the run analysed), untraced again. A case's probe effect is

    d = traced p50 - mean of the two untraced p50s        (the program's own RTT, its own clock)

and its events are those the analysis charges to the call's steps (analysis/kernelonly.py, step 6)
plus the one that ends it (the return of the client's receive, whose cost falls after its timestamp,
inside the program's RTT). With one cost c for every recorded event,

    d = n x c,   n = the case's median events a call,

solved by least squares through the origin over the run's cases: a case is corrected with the other
cases' c (leave one out), or with its own where it is the only one that calibrates. A case does not
calibrate when its path is one exchange of several a call (its events count one exchange; d holds
them all), when it ran --uprobe probes (a uprobe costs another price), or when it has no untraced
runs. Each step's corrected time, call by call, is its time less its charged events x c.
"""
import dataclasses
import statistics


@dataclasses.dataclass
class CasePoint:
    """One case's calibration point."""
    case_id: str
    traced_p50_us: float
    untraced_p50s_us: list
    events_per_call: float           # median over calls of the events charged to its steps, plus the end
    delta_us: float | None           # traced p50 less the untraced runs' mean
    why_not: str                     # why it does not calibrate ("" if it does)


@dataclasses.dataclass
class CaseCost:
    """The cost a case is corrected with and where it came from."""
    ns_per_event: float | None
    source: str


def point(res):
    """The CasePoint of a CaseResult (analysis/kernelonly.py)."""
    n = statistics.median(sum(c.events.values()) + 1 for c in res.calls) if res.calls else 0.0
    un = list(res.untraced_p50s_us or [])
    delta = res.program_p50_us - statistics.fmean(un) if un and res.program_p50_us else None
    why = ("no untraced runs in this capture" if not un
           else "its --uprobe probes cost another price than a kernel event" if res.uprobes
           else f"{res.per_call:.2f} exchanges a call: its path counts one exchange's events" if res.per_call > 1.05
           else "no calls" if not n else "")
    return CasePoint(case_id=res.case_id, traced_p50_us=res.program_p50_us, untraced_p50s_us=un,
                     events_per_call=float(n), delta_us=delta, why_not=why)


def _fit(points):
    """c (ns per event) = sum(d n) / sum(n^2) over points that calibrate; None if none does."""
    pts = [p for p in points if not p.why_not]
    den = sum(p.events_per_call ** 2 for p in pts)
    return sum(p.delta_us * 1e3 * p.events_per_call for p in pts) / den if den else None


def _cost(pts, source):
    c = _fit(pts)
    if c < 0:              # the untraced runs were slower than the traced one: drift, not a probe
        return CaseCost(0.0, f"{source}: measured {c:.0f} ns an event (below zero: the host's speed moved "
                             f"more between the runs than the probe costs), taken as 0")
    return CaseCost(c, source)


def costs(points):
    """{case id: CaseCost}: each case's cost from the other cases that calibrate, else from its own."""
    out = {}
    for p in points:
        others = [q for q in points if q.case_id != p.case_id and not q.why_not]
        if others:
            names = ", ".join(q.case_id for q in others) if len(others) <= 4 else f"{len(others)} of them"
            out[p.case_id] = _cost(others, f"in situ, the run's other cases ({names})")
        elif not p.why_not:
            out[p.case_id] = _cost([p], "in situ, its own untraced runs (the only case that calibrates)")
        else:
            out[p.case_id] = CaseCost(None, f"none: no case of the run calibrates ({p.why_not})")
    return out


def corrected(call, ns_per_event):
    """{K step: ns} of a call's steps less their charged events' cost."""
    return {k: v - call.events.get(k, 0) * ns_per_event for k, v in call.steps.items()}
