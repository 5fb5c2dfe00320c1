"""The report's first screen: where the time of a round trip goes, per transport and size.

    from rpcscope.reports.first_screen import views
    for v in views(load("runs/NAME")):      # one TransportView per transport
        v.bars      [Bar]: Measured split into client CPU, server CPU, wake-ups, network and the rest
        v.errors    [ErrorRow]: the model's % error per size beside its baselines (interp, line)
        v.sentence  the largest term and how it grows with size, from the data

It reads outputs only: analysis/rtp.json (each case's probe-corrected typical path), the model files
(analysis/model-TRANSPORT.json rows[].measured_us, error_pct, interp_error_pct, line_error_pct) and
manifest.json (cases[].untraced.p50 where no model file has the size). The notebook
(reports/notebooks/rpcscope.ipynb) draws the same views with matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from rpcscope.tracepoints import side_of, unit_of

from .svg import line_plot, nice_ticks, text_width

TERMS = ("client CPU", "server CPU", "wake-ups", "network")
REST = "not explained by the path"
PROBE = "probe effect removed"
COLORS = {"client CPU": "#1f77b4", "server CPU": "#ff7f0e", "wake-ups": "#9467bd", "network": "#2ca02c",
          REST: "#b0b0b0", PROBE: "#d9d9d9"}


def us(v):
    """Every µs figure of the first screen, rounded one way (as the model's table prints them)."""
    return "" if v is None else f"{round(v, 2) + 0.0:.2f}"        # + 0.0: no "-0.00"


def pct(v):
    return "" if v is None else f"{v:+.2f}"


@dataclass
class Bar:
    case: str
    transport: str
    size: int
    measured_us: float
    measured_source: str
    terms: dict                  # TERMS -> µs of the probe-corrected typical path
    path_us: float               # the corrected path's sum (= sum of terms)
    traced_us: float             # the same calls' path as traced (probes inside)
    unsided: list = field(default_factory=list)   # segments with no side, charged to the side before them

    @property
    def rest_us(self):
        """Measured − the corrected path's sum: negative where the path is longer than Measured."""
        return self.measured_us - self.path_us

    @property
    def probe_us(self):
        return self.traced_us - self.path_us


@dataclass
class ErrorRow:
    size: int
    kind: str
    measured_us: float | None
    model_pct: float | None
    interp_pct: float | None
    line_pct: float | None
    goal_pct: float | None


@dataclass
class TransportView:
    transport: str
    bars: list
    errors: list
    model_file: str              # "" without a model file
    sentence: str = ""

    @property
    def source(self):
        meas = (f"analysis/{self.model_file} rows[].measured_us" if self.model_file
                else "manifest.json cases[].untraced.p50")
        return (f"analysis/rtp.json cases[].path[].typical_corrected_ns (each segment to its term through "
                f"the step catalog's unit and side), typical_ns − typical_corrected_ns (probe effect removed); "
                f"Measured: {meas}")


def _side(label):
    """client or server for a path segment, None where neither the catalog nor the label says."""
    if side_of(label):
        return side_of(label)
    for side in ("client", "server"):
        if label.startswith(side):
            return side
    return None


def split_path(path):
    """({term: µs}, traced µs, [segments without a side]) of one case's rtp.json path[]: each segment's
    probe-corrected typical time to its term. A segment with no side (preempted, a softirq) goes to the
    CPU of the segment before it on the path."""
    terms = {t: 0.0 for t in TERMS}
    traced, unsided, last = 0.0, [], "client"
    for seg in path:
        label = seg["segment"]
        t_us = (seg.get("typical_corrected_ns") or 0.0) / 1e3
        traced += (seg.get("typical_ns") or 0.0) / 1e3
        unit = unit_of(label)
        side = _side(label)
        if side:
            last = side
        if unit == "network":
            terms["network"] += t_us
        elif unit == "wakeup":
            terms["wake-ups"] += t_us
        else:
            if not side and t_us:
                unsided.append(label)
            terms[f"{side or last} CPU"] += t_us
    return terms, traced, sorted(set(unsided))


def _measured(d, case, model_rows):
    row = model_rows.get(int(case.get("size", -1)))
    if row is not None and row.get("measured_us") is not None:
        return row["measured_us"], "model"
    p50 = (case.get("untraced") or {}).get("p50")
    return (p50 / 1e3 if p50 else None), "manifest"


def views(d):
    """One TransportView per transport with a measured path (analysis/rtp.json) or a model file."""
    manifest = {c.get("id"): c for c in d.cases}
    rtp_cases = (d.rtp or {}).get("cases") or []
    transports = list(dict.fromkeys([c.get("transport") for c in rtp_cases if c.get("transport")] + list(d.models)))
    out = []
    for t in transports:
        fname, model = d.models.get(t, ("", None))
        rows = {int(r["size"]): r for r in (model or {}).get("rows", [])}
        bars = []
        for c in rtp_cases:
            if c.get("transport") != t or not c.get("path") or c.get("case") not in manifest:
                continue
            meas, src = _measured(d, manifest[c["case"]], rows if model else {})
            if meas is None:
                continue
            terms, traced, unsided = split_path(c["path"])
            bars.append(Bar(c["case"], t, int(c["size"]), meas,
                            f"analysis/{fname} rows[size={c['size']}].measured_us" if src == "model" else
                            f"manifest.json cases[id={c['case']}].untraced.p50",
                            terms, sum(terms.values()), traced, unsided))
        bars.sort(key=lambda b: b.size)
        errors = [ErrorRow(z, r.get("kind", ""), r.get("measured_us"), r.get("error_pct"), r.get("interp_error_pct"),
                           r.get("line_error_pct"), r.get("goal_pct")) for z, r in sorted(rows.items())]
        v = TransportView(t, bars, errors, fname)
        v.sentence = sentence(v)
        out.append(v)
    return out


def _slope_per_kb(points):
    """Least-squares slope of [(size, µs)] in µs per 1000 bytes (None with fewer than two sizes)."""
    if len({z for z, _ in points}) < 2:
        return None
    n = len(points)
    mz = sum(z for z, _ in points) / n
    mv = sum(v for _, v in points) / n
    return 1000 * sum((z - mz) * (v - mv) for z, v in points) / sum((z - mz) ** 2 for z, _ in points)


def sentence(v):
    """One sentence from the data: the largest term at the smallest and largest size, and how it grows."""
    T = v.transport.upper()
    if not v.bars:
        return f"{T}: no measured path (run `rpcscope rtp RUN`), so the time cannot be split."
    lo, hi = v.bars[0], v.bars[-1]

    def largest(b):
        return max(TERMS, key=lambda t: b.terms[t])
    big = largest(hi)
    share = 100 * hi.terms[big] / hi.measured_us
    are, it = ("are", "they go") if big.endswith("s") else ("is", "it goes")
    s = f"{T}: {big} {are} the largest term"
    if lo is hi:
        return s + (f" at {hi.size} bytes, the only size with a path: {us(hi.terms[big])} µs, {share:.0f} % of "
                    f"Measured {us(hi.measured_us)} µs.")
    if largest(lo) != big:
        s += f" at {hi.size} bytes ({largest(lo)} at {lo.size} bytes)"
    else:
        s += " at every size" if all(largest(b) == big for b in v.bars) else f" at {hi.size} bytes"
    slope = _slope_per_kb([(b.size, b.terms[big]) for b in v.bars])
    fastest = max(TERMS, key=lambda t: _slope_per_kb([(b.size, b.terms[t]) for b in v.bars]))
    s += (f"; {it} from {us(lo.terms[big])} µs at {lo.size} bytes to {us(hi.terms[big])} µs at {hi.size} bytes "
          f"({share:.0f} % of Measured there), {slope:+.2f} µs per 1000 bytes")
    if fastest != big and _slope_per_kb([(b.size, b.terms[fastest]) for b in v.bars]) > max(slope, 0):
        s += (f"; {fastest} grows fastest, "
              f"{_slope_per_kb([(b.size, b.terms[fastest]) for b in v.bars]):+.2f} µs per 1000 bytes")
    return s + " (least-squares slopes over the sizes with a path)."


# ------------------------------------------------------------------ the stacked bars as SVG


def bar_chart(v, w=840, row=24):
    """Horizontal stacked bars, one per size: the terms left to right, the rest of Measured after them
    (grey; where the path is longer than Measured, a red-edged stretch back from the path's end to
    Measured), a tick at Measured, then the probe effect removed, hatched, beyond the bar. Each bar
    is a <g class="bar"> with data-case, data-size, data-measured-us; each stretch a rect with
    data-term and data-us (signed)."""
    left, right, top = 96, 70, 40
    names = list(TERMS) + [REST, PROBE]
    # legend rows: items laid out left to right, wrapped at the width
    legend, x, y = [], left, top
    for n in names:
        wn = 18 + text_width(n, 11) + 18
        if x + wn > w - 8:
            x, y = left, y + 16
        legend.append((n, x, y))
        x += wn
    plot_top = y + 16
    hi = max([max(b.measured_us, b.path_us) + max(b.probe_us, 0) for b in v.bars] + [1.0])
    ticks = nice_ticks(0.0, hi)
    hi = max(hi, ticks[-1])
    pw = w - left - right

    def X(val):
        return left + val / hi * pw
    h = plot_top + row * len(v.bars) + 40
    title = f"Where the time goes, {v.transport.upper()}: Measured RTT per request size"
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fig bars" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         f'role="img" font-family="sans-serif" font-size="11" data-transport="{escape(v.transport)}">'
         f'<title>{escape(title)}</title>',
         '<defs><pattern id="hatch-' + escape(v.transport) + '" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="white"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#888" stroke-width="2"/></pattern></defs>',
         f'<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>',
         f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>']
    hatch = f"url(#hatch-{escape(v.transport)})"
    for n, lx, ly in legend:
        fill = hatch if n == PROBE else COLORS[n]
        o.append(f'<rect x="{lx}" y="{ly - 9}" width="14" height="10" fill="{fill}" stroke="#555" stroke-width="0.5"/>'
                 f'<text x="{lx + 18}" y="{ly}">{escape(n)}</text>')
    base = plot_top + row * len(v.bars)
    for t in ticks:
        o.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{plot_top - 4}" y2="{base}" stroke="#eee"/>'
                 f'<text x="{X(t):.1f}" y="{base + 14}" text-anchor="middle">{t:g}</text>')
    o.append(f'<text x="{left + pw / 2:.0f}" y="{base + 32}" text-anchor="middle">µs (request size in bytes at '
             f'the left; Measured at the right)</text>')
    for i, b in enumerate(v.bars):
        y0 = plot_top + i * row + 4
        bh = row - 8
        o.append(f'<g class="bar" data-case="{escape(b.case)}" data-size="{b.size}" '
                 f'data-measured-us="{b.measured_us!r}" data-path-us="{b.path_us!r}" '
                 f'data-probe-us="{b.probe_us!r}" data-source="{escape(b.measured_source)}">')
        o.append(f'<text x="{left - 8}" y="{y0 + bh - 3}" text-anchor="end">{b.size}</text>')
        x = 0.0
        for t in TERMS:
            val = b.terms[t]
            o.append(f'<rect class="term" data-term="{t}" data-us="{val!r}" x="{X(x):.2f}" y="{y0}" '
                     f'width="{max(X(x + val) - X(x), 0):.2f}" height="{bh}" fill="{COLORS[t]}">'
                     f'<title>{b.size} bytes, {t}: {us(val)} µs</title></rect>')
            x += val
        r = b.rest_us
        if r >= 0:
            o.append(f'<rect class="term" data-term="{REST}" data-us="{r!r}" x="{X(x):.2f}" y="{y0}" '
                     f'width="{X(x + r) - X(x):.2f}" height="{bh}" fill="{COLORS[REST]}">'
                     f'<title>{b.size} bytes, {REST}: {us(r)} µs</title></rect>')
        else:
            o.append(f'<rect class="term negative" data-term="{REST}" data-us="{r!r}" x="{X(b.measured_us):.2f}" '
                     f'y="{y0 - 2}" width="{X(x) - X(b.measured_us):.2f}" height="{bh + 4}" fill="white" '
                     f'fill-opacity="0.55" stroke="#c00" stroke-width="1.2" stroke-dasharray="3 2">'
                     f'<title>{b.size} bytes, {REST}: {us(r)} µs (the path is longer than Measured)</title></rect>')
        end = max(b.measured_us, b.path_us)
        if b.probe_us > 0:
            o.append(f'<rect class="probe" data-us="{b.probe_us!r}" x="{X(end):.2f}" y="{y0 + 2}" '
                     f'width="{X(end + b.probe_us) - X(end):.2f}" height="{bh - 4}" fill="{hatch}" stroke="#888" '
                     f'stroke-width="0.5"><title>{b.size} bytes, {PROBE} (traced − corrected, not in Measured): '
                     f'{us(b.probe_us)} µs</title></rect>')
        o.append(f'<line class="measured" x1="{X(b.measured_us):.2f}" x2="{X(b.measured_us):.2f}" y1="{y0 - 3}" '
                 f'y2="{y0 + bh + 3}" stroke="#000" stroke-width="2"/>')
        o.append(f'<text x="{X(end + max(b.probe_us, 0)) + 4:.1f}" y="{y0 + bh - 3}">{us(b.measured_us)}</text>')
        o.append("</g>")
    o.append("</svg>")
    return "\n".join(o)


def error_chart(v, w=420, h=300):
    """The model's % error per size beside its baselines' (None without a model file)."""
    series = {name: [(e.size, getattr(e, key)) for e in v.errors]
              for name, key in (("model", "model_pct"), ("interpolation", "interp_pct"), ("line", "line_pct"))}
    series = {k: s for k, s in series.items() if any(y is not None for _, y in s)}
    if not series:
        return None
    return line_plot(series, f"% error, {v.transport.upper()}: model and baselines", "request size (bytes)",
                     "(Measured − Calculated) × 100 / Measured", w=w, h=h, dashed=("interpolation", "line"),
                     signed=True)


def error_columns():
    return ["size", "kind", "Measured µs", *TERMS, "not explained", "probe removed", "model %", "interp %", "line %"]


def table_rows(v):
    """Per size: the bar's figures and the model's % errors beside its baselines (one row per size of
    either)."""
    bars = {b.size: b for b in v.bars}
    errs = {e.size: e for e in v.errors}
    out = []
    for z in sorted(set(bars) | set(errs)):
        b, e = bars.get(z), errs.get(z)
        row = {"size": z, "kind": e.kind if e else "", "Measured µs": us(b.measured_us if b else e.measured_us)}
        if b:
            row.update({t: us(b.terms[t]) for t in TERMS})
            row.update({"not explained": us(b.rest_us), "probe removed": us(b.probe_us)})
        if e:
            row.update({"model %": pct(e.model_pct), "interp %": pct(e.interp_pct), "line %": pct(e.line_pct)})
        out.append(row)
    return out


HOSTS_COLUMNS = ["host", "role", "kind", "kernel", "clock", "tracers"]


def hosts_rows(d):
    """What kind of hosts the run saw, one row per host: a namespace on a shared kernel, a QEMU guest or
    a machine of its own; its kernel, its clock (CLOCK_MONOTONIC over its clocksource) and its tracers
    (LTTng-UST for the RPC's marks, the kernel collector that host ran). From manifest.json."""
    m = d.manifest
    tb = m.get("testbed") or {}
    per_host = m.get("kernel_collectors") or {}
    rows = []
    for name, h in (m.get("hosts") or {}).items():
        guest = "QEMU" in (h.get("cpu_model") or "")
        kind = ("namespace, shared kernel" if tb.get("shared_kernel") else
                "QEMU guest, own kernel" if guest else "own kernel")
        kc = per_host.get(name) or per_host.get("shared") or m.get("kernel_collector") or "none"
        rows.append({"host": name, "role": h.get("role", ""), "kind": kind, "kernel": h.get("kernel") or "",
                     "clock": f"{m.get('clock') or 'monotonic'} ({h.get('clocksource') or 'clocksource not recorded'})",
                     "tracers": f"LTTng-UST; kernel: {kc}"})
    return rows


def sync_sentence(d):
    """The synchronisation of the hosts' clocks in one sentence (analysis/steps.json clock_sync)."""
    cs = (d.steps_json or {}).get("clock_sync") or {}
    if not cs.get("cases"):
        return ""
    if cs.get("shared_kernel"):
        return (f"Clocks: one kernel clock for both hosts; the convex-hull check over the RPC's messages finds "
                f"zero within its bound in {cs.get('zero_within_bound', 0)} of {cs['cases']} cases.")
    if "offset_ns_range" not in cs:
        return f"Clocks: the server's clock could not be fitted to the client's in any of {cs['cases']} cases."
    lo, hi = (x / 1e9 for x in cs["offset_ns_range"])
    alo, ahi = (x / 1000 for x in cs["accuracy_ns_range"])
    dlo, dhi = cs["drift_ppm_range"]
    pts = cs.get("points_range") or [0, 0]
    s = (f"Clocks: two kernels. {cs.get('host') or 'The server'}'s CLOCK_MONOTONIC is {lo:+.6f} to {hi:+.6f} s "
         f"from {cs.get('reference') or 'the client'}'s (drift {dlo:+.1f} to {dhi:+.1f} ppm), fitted per case over "
         f"{pts[0]}-{pts[1]} messages with a bound of {alo:.1f}-{ahi:.1f} µs, and applied to the server's events "
         f"in {cs.get('applied', 0)} of {cs['cases']} cases.")
    ck = cs.get("check")
    if ck:
        s += (f" The SSH timestamp exchange agrees within the bounds in {ck['agrees']} of {ck['cases']} cases."
              if not ck.get("errors") or ck["agrees"] else f" The SSH timestamp exchange failed: {ck['errors'][0]}.")
    if cs.get("flagged"):
        s += (f" Flagged: {len(cs['flagged'])} case(s) whose bound exceeds the messages' one-way delay, where "
              "the order of one host's steps against the other's is not established by the clocks.")
    return s
