"""The RTT model of a target run (`rpcscope run --target`, `rpcscope model RUN`): the kernel-only round-trip
path of each size added up from a few unit costs, each shared by every step of its kind, counted with
the protocol's arithmetic (analysis/targetwire.py), and tested on sizes left out of the fit.

A call's path is K1..K11 (and KC1, KC2 where a --uprobe encloses the calls); each step's catalog unit
(tracepoints/steps.toml [[target_steps]] `unit`) puts it in a class, and each class's time, for the
typical call of a size, is regressed on the counts of the units in it:

    call     K6 (KC1, KC2)      call x 1 + marshal x the bodies' bytes (twice with the client's edges)
    send     K1, K7             send x 2 + copy_in x both messages' bytes
                                + packet, carry x the earlier IP fragments of a datagram (they pass the
                                device and the receiver's input before the last one's hand-off ends K1)
    packet   K2, K3, K8, K9     packet x 2 + carry x the last packet's bytes each way
    receive  K5, K11            receive x 2 + copy_out x both messages' bytes
    wakeup   K4, K10            wakeup x 2 (each side blocks for the other's message)

Nine unit costs, fitted by non-negative least squares over every fitted size's classes at once (each
row weighted by 1 / the size's path). A unit counted at fewer than MIN_SIZES fitted sizes is not fitted.
Measured is the typical call's path total (the mean of the calls nearest the median path), probe-corrected
where the run calibrates (analysis/kernelonly_probe.py); the program's own median stands beside it (its
untraced runs' where the path is corrected, else the traced run's).
The baselines predict the same Measured: linear interpolation between the nearest other sizes, and
A + B x bytes + C x packets through the other sizes.

    inp = case_input(res, fixed)                   # one case's model input (a dict, in kernelonly.json)
    m = build(target, transport, proc, inputs)     # TargetModel: unit costs, a row per size
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import numpy as np

from rpcscope.tracepoints.targetsteps import edges, on_path

from . import targetwire as W
from .model import MIN_SIZES, interpolate, line_baseline, nnls, percent_error

FORMAT = "rpcscope-targetmodel/1"
TYPICAL = 0.2            # the share of calls nearest the median path that make the typical call
UNITS = (
    ("call", "us/call", "once per call: the server's compute up to its reply send (K6); with a call probe also "
                        "the client's user space (KC1, KC2)"),
    ("marshal", "us/byte", "a byte of the request's or the reply's body, in a call-class step"),
    ("send", "us/send", "a send syscall up to its device hand-off (K1, K7)"),
    ("copy_in", "us/byte", "a byte a send on the path writes"),
    ("packet", "us/packet", "a packet through the device and the receiver's protocol input (K2, K3, K8, K9; a "
                            "datagram's earlier IP fragments inside K1, K7)"),
    ("carry", "us/byte", "a byte of those packets"),
    ("receive", "us/receive", "a receive syscall from running again to its return (K5, K11)"),
    ("copy_out", "us/byte", "a byte a receive on the path reads"),
    ("wakeup", "us/wake-up", "a blocked thread woken, from the waking to running again (K4, K10)"),
)
UNIT_NAMES = tuple(u[0] for u in UNITS)
CLASSES = ("call", "send", "packet", "receive", "wakeup")
CLASS_OF = {s.id: s.unit for s in (*on_path(), *edges())}


class TargetModelError(ValueError):
    """A model that cannot be made from a run (too few sizes, an unknown procedure)."""


def case_input(res, fixed=None):
    """One case's model input: the typical call's time per class (us), raw or probe-corrected (fixed: each
    call's corrected K steps, analysis/kernelonly_probe.corrected), and the stream bytes the trace saw."""
    calls = [c for c in res.calls if c.edges] or list(res.calls)
    if not calls:
        return None
    by_call = {id(c): f for c, f in zip(res.calls, fixed)} if fixed is not None else {}

    def steps(c):
        return {**(by_call.get(id(c)) or c.steps), **c.edges}

    totals = [sum(steps(c).values()) for c in calls]
    mid = statistics.median(totals)
    k = max(1, int(round(TYPICAL * len(calls))))
    typical = sorted(range(len(calls)), key=lambda i: abs(totals[i] - mid))[:k]
    cls = {c: 0.0 for c in CLASSES}
    for i in typical:
        for sid, ns in steps(calls[i]).items():
            cls[CLASS_OF[sid]] += ns / 1e3 / len(typical)
    return {"class_us": {c: round(v, 4) for c, v in cls.items()}, "path_us": round(sum(cls.values()), 4),
            "typical_calls": len(typical), "corrected": fixed is not None, "edges": bool(calls[0].edges),
            "stream_bytes_p50": [statistics.median(c.request for c in calls), statistics.median(c.reply for c in calls)]
            if res.transport == "tcp" else None}


def class_counts(ex, with_edges):
    """{class: {unit: count}} of one call's path (one exchange)."""
    extra_q, extra_r = ex.request_packets[:-1], ex.reply_packets[:-1]
    return {
        "call": {"call": 1, "marshal": (ex.request_body + ex.reply_body) * (2 if with_edges else 1)},
        "send": {"send": 2, "copy_in": ex.bytes, "packet": len(extra_q) + len(extra_r),
                 "carry": sum(extra_q) + sum(extra_r)},
        "packet": {"packet": 2, "carry": ex.request_packets[-1] + ex.reply_packets[-1]},
        "receive": {"receive": 2, "copy_out": ex.bytes},
        "wakeup": {"wakeup": 2},
    }


def _features(ex):
    """(bytes, packets) of one call, for the line baseline."""
    return ex.bytes, len(ex.request_packets) + len(ex.reply_packets)


@dataclass
class SizeInput:
    """One size of the model: its arithmetic, and what the run measured there (None: not captured)."""
    size: int
    exchange: W.Exchange
    path_us: float | None = None
    class_us: dict = field(default_factory=dict)
    program_us: float | None = None
    stream_bytes: list | None = None
    case: str = ""
    spread_pct: float | None = None


@dataclass
class Row:
    size: int
    kind: str                         # fitted, predicted (captured, not fitted) or calculated (not captured)
    measured_us: float | None
    spread_pct: float | None          # half the spread of the size's rounds' paths, over the kept one
    case: str                         # the case (round) whose path is measured_us
    model_us: float
    error_pct: float | None
    cv_us: float | None               # fitted sizes: the model fitted without this size
    cv_error_pct: float | None
    interp_error_pct: float | None    # the baselines, fitted without this size
    line_error_pct: float | None
    program_us: float | None
    path_vs_program_pct: float | None
    request_bytes: int
    reply_bytes: int
    measured_bytes: list | None


class Fit:
    """Unit costs fitted on some sizes' class times."""

    def __init__(self, inputs, sizes, with_edges):
        self.with_edges = with_edges
        X, y, w = [], [], []
        counted = {u: set() for u in UNIT_NAMES}
        for z in sizes:
            si = inputs[z]
            for cls, counts in class_counts(si.exchange, with_edges).items():
                X.append([float(counts.get(u, 0)) for u in UNIT_NAMES])
                y.append(si.class_us.get(cls, 0.0))
                w.append(1.0 / (si.path_us or 1.0))
                for u, n in counts.items():
                    if n:
                        counted[u].add(z)
        self.why_not = {u: f"counted at {len(s)} fitted size(s), fewer than {MIN_SIZES}"
                        for u, s in counted.items() if len(s) < MIN_SIZES}
        active = [j for j, u in enumerate(UNIT_NAMES) if u not in self.why_not]
        coef = nnls(np.array(X), np.array(y), np.array(w), active) if X else np.zeros(len(UNIT_NAMES))
        self.theta = dict(zip(UNIT_NAMES, map(float, coef)))

    def path_us(self, ex):
        return sum(self.theta[u] * n for counts in class_counts(ex, self.with_edges).values()
                   for u, n in counts.items())


@dataclass
class TargetModel:
    target: str
    transport: str
    proc: str
    mtu: int
    header_bytes: tuple
    with_edges: bool
    corrected: bool
    fitted: list
    params: list
    rows: list

    def summary(self):
        """Mean |% error| of the model and the baselines over the sizes each did not see."""
        unseen = [r for r in self.rows if r.kind == "predicted" and r.error_pct is not None]
        cv = [r for r in self.rows if r.kind == "fitted" and r.cv_error_pct is not None]

        def mae(rows, attr):
            v = [abs(getattr(r, attr)) for r in rows if getattr(r, attr) is not None]
            return round(statistics.fmean(v), 2) if v else None
        return {"predicted_sizes": len(unseen),
                "predicted_mean_abs_error_pct": {"model": mae(unseen, "error_pct"),
                                                 "interpolation": mae(unseen, "interp_error_pct"),
                                                 "line": mae(unseen, "line_error_pct")},
                "cv_sizes": len(cv),
                "cv_mean_abs_error_pct": {"model": mae(cv, "cv_error_pct"),
                                          "interpolation": mae(cv, "interp_error_pct"),
                                          "line": mae(cv, "line_error_pct")}}

    def to_json(self):
        return {"format": FORMAT, "target": self.target, "transport": self.transport, "proc": self.proc,
                "mtu": self.mtu, "header_bytes": list(self.header_bytes),
                "path": "KC1, K1..K11, KC2 (a call probe's edges)" if self.with_edges else "K1..K11",
                "measured": "the typical call's path total (the mean of the "
                            f"{TYPICAL:.0%} of calls nearest the median path), "
                            + ("probe-corrected" if self.corrected else "as traced (no probe correction)"),
                "program": "the program's median: its untraced runs' (the path is corrected)" if self.corrected
                           else "the program's median in the traced run (the path is as traced)",
                "fitted": self.fitted, "params": self.params, "rows": [asdict(r) for r in self.rows],
                "summary": self.summary()}


def _header_bytes(target, transport, proc, inputs, sizes):
    """gRPC's HPACK frames each way: the trace's stream bytes less the arithmetic's, median over the sizes."""
    if target != "grpc":
        return (0, 0)
    diffs = [[], []]
    for z in sizes:
        seen = inputs[z].get("stream_bytes_p50")
        if seen:
            q, r = W.stream_bytes(target, transport, proc, z)
            diffs[0].append(seen[0] - q)
            diffs[1].append(seen[1] - r)
    if not diffs[0]:
        raise TargetModelError("gRPC's header frames are sized from the trace's stream bytes, which this run lacks")
    return int(statistics.median(diffs[0])), int(statistics.median(diffs[1]))


def build(target, transport, proc, cases, fit_sizes=None, predict=(), mtu=W.P.DEFAULT_MTU):
    """The TargetModel of one transport of a run. cases: {size: {"model_input": case_input(...),
    "program_p50_us": ...}}; fit_sizes: the sizes fitted (default every captured one); predict: more
    sizes to calculate. A case may carry round_paths_us, every round's path at its size."""
    inputs = {z: c["model_input"] for z, c in cases.items() if c.get("model_input")}
    fit_sizes = sorted(fit_sizes if fit_sizes is not None else inputs)
    missing = [z for z in fit_sizes if z not in inputs]
    if missing:
        raise TargetModelError(f"no captured {transport} case at fitted size(s) {', '.join(map(str, missing))}")
    if len(fit_sizes) < MIN_SIZES:
        raise TargetModelError(f"the model fits at {MIN_SIZES} sizes or more; {transport} has "
                               f"{len(fit_sizes)} ({', '.join(map(str, fit_sizes)) or 'none'})")
    with_edges = {inputs[z]["edges"] for z in fit_sizes}
    corrected = {inputs[z]["corrected"] for z in fit_sizes}
    if len(with_edges) > 1 or len(corrected) > 1:
        raise TargetModelError("the fitted sizes' paths differ (some with a call probe's edges or a probe "
                               "correction, some without): capture them in one run")
    try:
        header = _header_bytes(target, transport, proc, inputs, fit_sizes)
        sizes = sorted(set(inputs) | set(predict))
        si = {z: SizeInput(z, W.exchange(target, transport, proc, z, mtu, header)) for z in sizes}
    except W.WireError as e:
        raise TargetModelError(str(e)) from None
    edges_on, corrected = with_edges.pop(), corrected.pop()
    for z, inp in inputs.items():
        si[z].path_us, si[z].class_us = inp["path_us"], inp["class_us"]
        # a corrected path stands for the calls without the probe: the untraced runs' median
        si[z].program_us = ((cases[z].get("probe") or {}).get("untraced_program_p50_us") if corrected
                            else cases[z].get("program_p50_us"))
        si[z].stream_bytes = inp.get("stream_bytes_p50")
        si[z].case = cases[z].get("case", "")
        paths = cases[z].get("round_paths_us") or []
        if len(paths) > 1:
            si[z].spread_pct = round(50 * (max(paths) - min(paths)) / inp["path_us"], 1)
    fit = Fit(si, fit_sizes, edges_on)
    feats = {z: _features(s.exchange) for z, s in si.items()}
    rows = []
    for z in sizes:
        s = si[z]
        others = [x for x in fit_sizes if x != z]
        pts = {x: si[x].path_us for x in others}
        cv = Fit(si, others, edges_on).path_us(s.exchange) if z in fit_sizes and len(others) >= MIN_SIZES else None
        line = line_baseline(pts, None, feats.get)
        model = fit.path_us(s.exchange)
        kind = "fitted" if z in fit_sizes else "predicted" if s.path_us is not None else "calculated"
        rows.append(Row(
            size=z, kind=kind, measured_us=s.path_us, spread_pct=s.spread_pct, case=s.case, model_us=round(model, 3),
            error_pct=_r(percent_error(s.path_us, model)), cv_us=None if cv is None else round(cv, 3),
            cv_error_pct=_r(percent_error(s.path_us, cv)),
            interp_error_pct=_r(percent_error(s.path_us, interpolate(pts, z) if len(pts) >= 2 else None)),
            line_error_pct=_r(percent_error(s.path_us, line(z) if line else None)),
            program_us=s.program_us, path_vs_program_pct=_r(percent_error(s.program_us, s.path_us)),
            request_bytes=s.exchange.request_bytes, reply_bytes=s.exchange.reply_bytes,
            measured_bytes=s.stream_bytes))
    units = {u[0]: u for u in UNITS}
    params = [{"name": n, "unit": units[n][1], "what": units[n][2], "value": round(fit.theta[n], 6),
               "fitted": n not in fit.why_not, "why_not": fit.why_not.get(n, "")} for n in UNIT_NAMES]
    return TargetModel(target=target, transport=transport, proc=proc, mtu=mtu, header_bytes=header,
                       with_edges=edges_on, corrected=corrected, fitted=fit_sizes, params=params, rows=rows)


def _r(v):
    return None if v is None else round(v, 2)
