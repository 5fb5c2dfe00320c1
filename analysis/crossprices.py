"""The probe prices behind a cross-check's two corrections, side by side, per case.

The traced analysis corrects with the prices its in-situ solve gives (analysis/probe.py: one user and
one kernel event's cost on the round-trip path, from traced minus untraced p50 over a transport's
cases); the kernel-only analysis with the price of one kernel event measured by its own runs
(analysis/kernelonly_probe.py: the untraced build under kernel tracing less the untraced build alone).
Where both record kernel events with one tracer (ftrace, on the local testbed), the traced run's probe
effect less its kernel events on the path at the kernel-only price, per user event on the path, is the
price of a user event those two measurements imply: set beside the traced solve's, it shows how the
solve shares the probe effect between the two kinds of event (over TCP the cases' paths hold both in
nearly one ratio, and the solve cannot tell them apart), and beside what the user tracepoints add to
each interval (crosscheck `user +`), where that cost lands.

    from rpcscope.analysis.crossprices import case_prices, traced_probes
    probes = traced_probes(["runs/both"])                # each traced run's analysis/probe.json
    case_prices(probes, "tcp-maxarg-0", "tcp", summaries)  # dict (crosscheck --json cases[].prices) or None
"""
import json

from rpcscope.rundir import RunDir

from .crossstretch import median as _median


def traced_probes(runs):
    """Each traced run's in-situ probe calibration (analysis/probe.json; {} where it has none)."""
    out = []
    for run in runs:
        try:
            doc = json.loads(RunDir(run).probe_json.read_text())
        except (OSError, ValueError):
            doc = {}
        out.append(doc if isinstance(doc, dict) else {})
    return out


def _traced(probe, case, transport):
    """(user ns, kernel ns, method, probe effect ns, user events, kernel events on the path) of one traced
    run's case, or None where its solve did not take the case as a point (a held-out size, another path)."""
    cost = (probe.get("cases") or {}).get(case) or {}
    point = (((probe.get("transports") or {}).get(transport) or {}).get("points") or {}).get(case) or {}
    ev = point.get("path_events_per_call") or {}
    kev = cost.get("kernel_event_ns") or {}
    if None in (cost.get("ust_event_ns"), point.get("d_total_ns"), ev.get("ust")) or not kev:
        return None
    n_net, n_other = ev.get("kernel_net") or 0.0, ev.get("kernel_other") or 0.0
    n_k = n_net + n_other
    kernel = (n_net * kev.get("net", 0.0) + n_other * kev.get("other", 0.0)) / n_k if n_k else None
    return cost["ust_event_ns"], kernel, cost.get("method"), point["d_total_ns"], ev["ust"], n_k


def case_prices(probes, case, transport, ko_summaries):
    """The prices of one case (medians over the traced runs and over the kernel-only runs), or None where
    either side has none: the traced solve's per user and per kernel event, its probe effect and events on
    the path, the kernel-only runs' per kernel event, and the user event's price that leaves."""
    got = [x for x in (_traced(p, case, transport) for p in probes) if x]
    ko = _median([(s.get("probe") or {}).get("ns_per_event") for s in ko_summaries])
    if not got or ko is None:
        return None
    user, kernel, d, n_u, n_k = (_median([x[i] for x in got]) for i in (0, 1, 3, 4, 5))
    left = (d - n_k * ko) / n_u if n_u else None
    return {"traced_user_event_ns": round(user, 1),
            "traced_kernel_event_ns": None if kernel is None else round(kernel, 1), "traced_method": got[0][2],
            "traced_probe_effect_us": round(d / 1e3, 2),
            "path_user_events": n_u, "path_kernel_events": n_k, "kernel_only_event_ns": round(ko, 1),
            "user_event_left_ns": None if left is None else round(left, 1)}


def render(p):
    """One line of the crosscheck's table for a case's prices (p: case_prices)."""
    def ns(v):
        return "-" if v is None else f"{v:.0f}"

    return (f"  probe prices: the traced solve charges {ns(p['traced_user_event_ns'])} ns a user event and "
            f"{ns(p['traced_kernel_event_ns'])} ns a kernel event ({p['traced_method']}); at the kernel-only "
            f"runs' {ns(p['kernel_only_event_ns'])} ns a kernel event, its probe effect of "
            f"{p['traced_probe_effect_us']:.1f} us over {p['path_user_events']:g} user and "
            f"{p['path_kernel_events']:g} kernel events on the path leaves {ns(p['user_event_left_ns'])} ns a "
            f"user event")
