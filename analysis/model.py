"""The round-trip-time model: a few physical unit costs, counts from the protocol, the wire from physics.

    calculated RTT(size) = the end of one call laid out with the unit costs (analysis/pathsim.py)
                         ~ sum over units of unit cost x its count on the path + the wire's time

The unit costs (pathsim.UNITS: per call, per send, per packet, per receive, per wake-up, per
window acknowledgement, and per byte marshalled, copied in and copied out) are shared by every step of their kind:
the step
catalog (tracepoints/steps.toml, each step's `unit`) says which kind a step is. They are fitted
by weighted least squares from the measured round-trip path of the fitted sizes: each class's
probe-corrected time on the path (analysis/rtp.json, the typical call) against that class's count
on the computed path and the bytes it copies. The untraced RTTs (Measured) are not an input of
the fit: they judge it. A unit that fewer than MIN_SIZES fitted sizes count is not fitted (0).

Each size is then one of
    fitted      in the fit; its row also gives the fit without it (cross-validated)
    predicted   not in the fit: nothing measured at that size enters its row but Measured

and beside the model stand two baselines a skeptic would use, both from the untraced RTTs of the
fitted sizes: linear interpolation between the nearest measured sizes, and a line
A + B x bytes + C x packets. % Error = (Measured - Calculated) x 100 / Measured (the DCE study's
sign: positive when the model is short).

    fit(obs, sizes)             -> Model
    Model.rows(sizes)           -> [Row] per size: kind, calculated, measured, % errors, baselines
    Model.predict(size, link)   -> pathsim.CallPath at any size, on any link
    Model.to_json()/from_json() the model file (rpcscope-model/2)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from rpcscope import packets as P
from rpcscope.rundir import MODEL_FORMAT, PREDICTION_FORMAT

from . import network as N
from .pathsim import BYTE_UNITS, CLASSES, UNIT_NAMES, UNITS, Workload, call_path

MIN_SIZES = 3               # a unit is fitted only where at least this many fitted sizes count it
MAX_ITERATIONS = 30
FIT_GOAL_PCT = 2.0          # |% error| goal at a fitted size
PREDICT_GOAL_PCT = 5.0      # ... and at a predicted one


class ModelError(ValueError):
    """A fit or prediction that cannot be made (too few sizes, unknown procedure, bad file)."""


def percent_error(measured, calculated):
    """(Measured - Calculated) x 100 / Measured, the DCE study's sign; None where either is missing."""
    if measured is None or calculated is None or not measured:
        return None
    return (measured - calculated) * 100.0 / measured


@dataclass(frozen=True)
class SizeObservation:
    """What a capture measured at one size."""
    size: int
    measured_us: float | None           # untraced p50 RTT (the round whose traces were kept)
    measured_spread_pct: float | None   # half the spread of every round's untraced p50, % of Measured
    class_us: dict                      # unit class -> µs on the measured path (probe-corrected, typical call)
    network_us: float = 0.0             # the measured path's network segments (the wire is physics here)
    path_us: float | None = None        # the measured path's sum (probe-corrected)


@dataclass(frozen=True)
class Observations:
    """One transport's measurements from one capture (analysis/model_input.py reads a run)."""
    transport: str
    proc: str
    link: N.Link
    sizes: dict                          # size -> SizeObservation
    source: str = ""
    inputs: dict = field(default_factory=dict)   # what each number of the model was taken from

    def workload(self):
        return Workload(self.transport, self.proc, self.link.mtu)


@dataclass(frozen=True)
class Row:
    """One size of the model's table."""
    size: int
    kind: str                      # fitted | predicted
    calculated_us: float
    measured_us: float | None
    error_pct: float | None
    cv_calculated_us: float | None  # fitted sizes: calculated by the fit without this size
    cv_error_pct: float | None
    interp_us: float | None         # baseline: interpolation of the fitted sizes' Measured
    interp_error_pct: float | None
    line_us: float | None           # baseline: A + B x bytes + C x packets through them
    line_error_pct: float | None
    measured_spread_pct: float | None
    goal_pct: float
    counts: dict
    wire_us: float
    paced_by: str


# ------------------------------------------------------------------ baselines


def interpolate(points, size):
    """Linear interpolation of {size: us} at size; beyond the ends, the line through the two nearest."""
    xs = sorted(points)
    if not xs:
        return None
    if len(xs) == 1:
        return points[xs[0]]
    if size <= xs[0]:
        a, b = xs[0], xs[1]
    elif size >= xs[-1]:
        a, b = xs[-2], xs[-1]
    else:
        b = next(x for x in xs if x >= size)
        a = xs[xs.index(b) - 1]
        if b == size:
            return points[b]
    return points[a] + (points[b] - points[a]) * (size - a) / (b - a)


def wire_features(wl, size):
    """(bytes, packets) of one call: both messages' bodies and their IP packets (TCP: segments)."""
    qb, rb = wl.bodies(size)
    if wl.transport == "tcp":
        return qb + rb, P.tcp_segments(qb, wl.mtu) + P.tcp_segments(rb, wl.mtu)
    return qb + rb, P.request_packets(qb, wl.max_pdu, wl.mtu) + P.request_packets(rb, wl.max_pdu, wl.mtu)


def line_baseline(points, wl, features=None):
    """A + B x bytes + C x packets, least squares through {size: us} with A, B, C >= 0 (bytes and
    packets are nearly collinear: unconstrained, the line trades a negative cost per byte for a
    large one per packet and falls between the fitted sizes); a function of size, or None.
    features(size) -> (bytes, packets): the workload's (wire_features) unless given."""
    feats = features or (lambda z: wire_features(wl, z))
    xs = sorted(points)
    if len(xs) < 3:
        return None
    X = np.array([[1.0, *feats(z)] for z in xs])
    y = np.array([points[z] for z in xs])
    coef = nnls(X, y, np.ones(len(xs)), range(X.shape[1]))   # no term makes a call shorter
    return lambda z: float(np.dot(coef, [1.0, *feats(z)]))


# ------------------------------------------------------------------ the fit


def _initial():
    return {"call": 5.0, "send": 2.0, "packet": 1.0, "receive": 2.0, "wakeup": 3.0, "ack": 1.0,
            "marshal": 1e-3, "copy_in": 1e-3, "copy_out": 1e-3, "carry": 1e-4}


def _design(wl, link, sizes, theta, obs):
    """Rows (one per size and class) of counts and bytes on the computed path, the measured class
    times, and weights 1 / the size's measured path (the error that matters is relative; Measured,
    the untraced RTT, stays out of the fit)."""
    X, y, w = [], [], []
    for z in sizes:
        cp = call_path(wl, z, theta, link)
        o = obs.sizes[z]
        scale = o.path_us or cp.rtt_us or 1.0
        for cls in CLASSES:
            row = [0.0] * len(UNIT_NAMES)
            row[UNIT_NAMES.index(cls)] = cp.counts.get(cls, 0)
            if cls in BYTE_UNITS:
                row[UNIT_NAMES.index(BYTE_UNITS[cls])] = cp.bytes_by_class.get(cls, 0)
            X.append(row)
            y.append(o.class_us.get(cls, 0.0))
            w.append(1.0 / scale)
    return np.array(X, float), np.array(y, float), np.array(w, float)


def nnls(X, y, w, active):
    """Weighted least squares over the active columns, dropping any column that comes out negative
    (a unit cost is never below 0) and solving again."""
    active = list(active)
    while True:
        A = X[:, active] * w[:, None]
        coef = np.linalg.lstsq(A, y * w, rcond=None)[0] if active else np.zeros(0)
        neg = [a for a, c in zip(active, coef) if c < 0]
        if not neg:
            out = np.zeros(X.shape[1])
            out[active] = coef
            return out
        active.remove(min(neg, key=lambda a: coef[active.index(a)]))


def _identified(X, sizes):
    """Columns counted at MIN_SIZES or more fitted sizes, and why the others are not fitted."""
    n = len(CLASSES)
    keep, dropped = [], {}
    for j, name in enumerate(UNIT_NAMES):
        per_size = [np.any(X[i * n:(i + 1) * n, j] != 0) for i in range(len(sizes))]
        k = int(sum(per_size))
        if k >= MIN_SIZES:
            keep.append(j)
        else:
            dropped[name] = f"counted at {k} fitted size(s); a unit is fitted where {MIN_SIZES} or more count it"
    return keep, dropped


def fit_theta(obs, sizes):
    """The unit costs {unit: us} fitted at these sizes, {unit: why not fitted}, iterations."""
    sizes = sorted(sizes)
    missing = [z for z in sizes if z not in obs.sizes]
    if missing:
        raise ModelError(f"no measured path at size(s) {', '.join(map(str, missing))}")
    if len(sizes) < MIN_SIZES:
        raise ModelError(f"a fit needs at least {MIN_SIZES} sizes, got {len(sizes)}")
    wl, theta, dropped = obs.workload(), _initial(), {}
    seen = []                   # (theta, dropped, residual of the round trips that theta lays out)
    for it in range(1, MAX_ITERATIONS + 1):
        X, y, w = _design(wl, obs.link, sizes, theta, obs)
        if it > 1:
            seen.append((theta, dropped, _path_residual(wl, obs, sizes, theta)))
        active, dropped = _identified(X, sizes)
        coef = nnls(X, y, w, active)
        new = {u: float(c) for u, c in zip(UNIT_NAMES, coef)}
        if any(_same(new, t) for t, _, _ in seen) or _same(new, theta):
            if _same(new, theta):
                return theta, dropped, it
            # The costs cycle between layouts (each layout's fit lays out the other): keep the one
            # whose own laid-out round trips come nearest the measured paths' totals. Which class a
            # stretch of overlap is charged to flips with the layout; the round trip does not.
            best = min(seen, key=lambda s: s[2])
            return best[0], best[1], it
        theta = new
    return theta, dropped, MAX_ITERATIONS


def _path_residual(wl, obs, sizes, theta):
    """Σ over the sizes of ((laid-out round trip − the measured path's total) / that total)²."""
    out = 0.0
    for z in sizes:
        total = obs.sizes[z].path_us
        out += ((call_path(wl, z, theta, obs.link).cpu_us - total) / total) ** 2 if total else 0.0
    return out


def _same(a, b):
    return all(math.isclose(a[u], b[u], rel_tol=1e-9, abs_tol=1e-12) for u in UNIT_NAMES)


@dataclass
class Model:
    """A fitted model: unit costs, where they came from, and the observations that judge them."""
    obs: Observations
    theta: dict
    fitted: list
    dropped: dict
    iterations: int
    cv: dict = field(default_factory=dict)        # fitted size -> calculated without it

    @property
    def workload(self):
        return self.obs.workload()

    def predict(self, size, link=None):
        return call_path(self.workload, size, self.theta, link or self.obs.link)

    def params(self):
        """The fitted parameters with their units and what a count is."""
        return [{"name": n, "unit": u, "value": self.theta.get(n, 0.0), "what": what,
                 "fitted": n not in self.dropped, "why_not": self.dropped.get(n)} for n, u, what in UNITS]

    def rows(self, sizes=None):
        sizes = sorted(set(sizes or []) | set(self.obs.sizes) | set(self.fitted))
        measured = {z: o.measured_us for z, o in self.obs.sizes.items() if o.measured_us}
        base = {z: measured[z] for z in self.fitted if z in measured}
        line = line_baseline(base, self.workload)
        out = []
        for z in sizes:
            cp = self.predict(z)
            o = self.obs.sizes.get(z)
            m = o.measured_us if o else None
            fitted = z in self.fitted
            others = {k: v for k, v in base.items() if k != z} if fitted else base
            interp = interpolate(others, z) if others else None
            lz = (line_baseline(others, self.workload) if fitted else line)
            lv = lz(z) if lz else None
            cv = self.cv.get(z)
            out.append(Row(z, "fitted" if fitted else "predicted", cp.rtt_us, m, percent_error(m, cp.rtt_us),
                           cv, percent_error(m, cv), interp, percent_error(m, interp), lv, percent_error(m, lv),
                           o.measured_spread_pct if o else None, FIT_GOAL_PCT if fitted else PREDICT_GOAL_PCT,
                           cp.counts, cp.wire.total_us, cp.paced_by))
        return out

    def summary(self, rows=None):
        """Mean |% error| of model and baselines over the predicted sizes with a Measured, and how many
        sizes meet their goal."""
        rows = rows or self.rows()
        pred = [r for r in rows if r.kind == "predicted" and r.measured_us]
        fitted = [r for r in rows if r.kind == "fitted" and r.measured_us]

        def mean_abs(key, rs):
            v = [abs(getattr(r, key)) for r in rs if getattr(r, key) is not None]
            return sum(v) / len(v) if v else None

        return {"predicted_sizes": len(pred),
                "mean_abs_error_pct": {"model": mean_abs("error_pct", pred),
                                       "interpolation": mean_abs("interp_error_pct", pred),
                                       "line": mean_abs("line_error_pct", pred)},
                "cv_mean_abs_error_pct": {"model": mean_abs("cv_error_pct", fitted),
                                          "interpolation": mean_abs("interp_error_pct", fitted),
                                          "line": mean_abs("line_error_pct", fitted)},
                "fitted_within_goal": sum(abs(r.error_pct) <= r.goal_pct for r in fitted),
                "fitted_sizes": len(fitted),
                "predicted_within_goal": sum(abs(r.error_pct) <= r.goal_pct for r in pred)}

    def to_json(self, sizes=None):
        rows = self.rows(sizes)
        return {"format": MODEL_FORMAT, "transport": self.obs.transport, "proc": self.obs.proc,
                "source": self.obs.source, "link": self.obs.link.to_json(), "link_described": self.obs.link.describe(),
                "max_pdu": P.DEFAULT_MAX_PDU, "params": self.params(), "fitted_sizes": self.fitted,
                "iterations": self.iterations, "inputs": self.obs.inputs,
                "observations": {str(z): asdict(o) for z, o in sorted(self.obs.sizes.items())},
                "cv": {str(z): v for z, v in self.cv.items()},
                "rows": [asdict(r) for r in rows], "summary": self.summary(rows),
                "error_sign": "% Error = (Measured - Calculated) x 100 / Measured"}

    @classmethod
    def from_json(cls, d):
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ModelError(f"not a model file of format {MODEL_FORMAT} (got {got!r}): fit it again with "
                             f"`rpcscope model RUN`")
        try:
            obs = Observations(d["transport"], d["proc"], N.Link.from_json(d["link"]),
                               {int(z): SizeObservation(**o) for z, o in d["observations"].items()},
                               d.get("source", ""), d.get("inputs", {}))
            theta = {p["name"]: float(p["value"]) for p in d["params"]}
            dropped = {p["name"]: p["why_not"] for p in d["params"] if not p["fitted"]}
            return cls(obs, theta, [int(z) for z in d["fitted_sizes"]], dropped, int(d.get("iterations", 0)),
                       {int(z): v for z, v in d.get("cv", {}).items()})
        except (KeyError, TypeError, ValueError, N.LinkError) as e:
            raise ModelError(f"damaged model file: {e!r}; fit it again with `rpcscope model RUN`") from None


def fit(obs, sizes, cross_validate=True):
    """The Model fitted at these sizes; with cross_validate, each fitted size is also calculated by a
    fit that leaves it out (where the others still number MIN_SIZES)."""
    theta, dropped, it = fit_theta(obs, sizes)
    m = Model(obs, theta, sorted(sizes), dropped, it)
    if cross_validate and len(sizes) > MIN_SIZES:
        for z in sizes:
            th, _, _ = fit_theta(obs, [s for s in sizes if s != z])
            m.cv[z] = call_path(obs.workload(), z, th, obs.link).rtt_us
    return m


def prediction(model, sizes, link):
    """A what-if: the model's RTT at sizes on a link, as the prediction file `rpcscope verify` reads."""
    rows = []
    for z in sorted(sizes):
        cp = model.predict(z, link)
        rows.append({"size": z, "calculated_us": cp.rtt_us, "cpu_us": cp.cpu_us, "wire_us": cp.wire.total_us,
                     "paced_by": cp.paced_by, "counts": cp.counts})
    return {"format": PREDICTION_FORMAT, "transport": model.obs.transport, "proc": model.obs.proc,
            "model_source": model.obs.source, "model_link": model.obs.link.to_json(),
            "link": link.to_json(), "link_described": link.describe(), "rows": rows,
            "params": model.params()}
