"""Plain-Python SVG figures for the report: no matplotlib, no external resources.

    line_plot(series, ...)      x/y lines with markers, optional vertical marks (packet boundaries)
    cdf_plot(series, ...)       step CDFs (per-RPC samples, or percentile points)
    histogram(values, ...)      one histogram
    binned_histograms(series)   histograms already binned (the client's rtt_hist), overlaid as outlines
    rtp_diagram(lanes, ...)     the DCE study's Figure 5 in boxes: client, network, server columns

Every function returns one <svg> element as a string (width/height set, viewBox, a <title>).
"""
from __future__ import annotations

import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
FONT = 'font-family="sans-serif" font-size="11"'


def _e(s):
    return escape(str(s), quote=True)


def nice_ticks(lo, hi, n=6):
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _fmt(v):
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.2g}"


class _Axes:
    def __init__(self, x0, x1, y0, y1, w=640, h=360, left=64, right=16, top=34, bottom=48, xlog=False):
        self.w, self.h, self.l, self.r, self.t, self.b = w, h, left, right, top, bottom
        self.xlog = xlog
        self.xt = nice_ticks(x0, x1)
        self.yt = nice_ticks(y0, y1)
        self.x0, self.x1 = min(self.xt[0], x0), max(self.xt[-1], x1)
        # the last x tick's label, centred on the plot's right edge, stays inside the figure
        self.r = max(self.r, text_width(_fmt(self.xt[-1]), 11) / 2 + 4)
        self.y0, self.y1 = min(self.yt[0], y0), max(self.yt[-1], y1)

    def X(self, x):
        return self.l + (x - self.x0) / ((self.x1 - self.x0) or 1) * (self.w - self.l - self.r)

    def Y(self, y):
        return self.h - self.b - (y - self.y0) / ((self.y1 - self.y0) or 1) * (self.h - self.t - self.b)

    def frame(self, title, xlabel, ylabel):
        o = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fig" width="{self.w}" height="{self.h}" '
             f'viewBox="0 0 {self.w} {self.h}" role="img" {FONT}><title>{_e(title)}</title>',
             f'<rect x="0" y="0" width="{self.w}" height="{self.h}" fill="white"/>',
             f'<text x="{self.w / 2:.1f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">'
             f'{_e(title)}</text>']
        for v in self.yt:
            y = self.Y(v)
            o.append(f'<line x1="{self.l}" x2="{self.w - self.r}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
            o.append(f'<text x="{self.l - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        for v in self.xt:
            x = self.X(v)
            o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.h - self.b}" y2="{self.h - self.b + 4}" '
                     'stroke="#333"/>')
            o.append(f'<text x="{x:.1f}" y="{self.h - self.b + 16}" text-anchor="middle">{_fmt(v)}</text>')
        o.append(f'<rect x="{self.l}" y="{self.t}" width="{self.w - self.l - self.r}" '
                 f'height="{self.h - self.t - self.b}" fill="none" stroke="#333"/>')
        o.append(f'<text x="{(self.l + self.w - self.r) / 2:.1f}" y="{self.h - self.b + 38}" '
                 f'text-anchor="middle">{_e(xlabel)}</text>')
        o.append(f'<text transform="translate(14 {(self.t + self.h - self.b) / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{_e(ylabel)}</text>')
        return o

    def legend(self, names, dashed=()):
        o = []
        for i, n in enumerate(names):
            y = self.t + 12 + i * 15
            x = self.l + 10
            d = ' stroke-dasharray="5 3"' if n in dashed else ""
            o.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{PALETTE[i % len(PALETTE)]}" '
                     f'stroke-width="2"{d}/>')
            o.append(f'<text x="{x + 24}" y="{y}">{_e(n)}</text>')
        return o

    def legend_rows(self, names):
        """[(name, x, row)] of a legend laid out left to right below the x-axis label, wrapped at the width."""
        out, x, row = [], self.l, 0
        for n in names:
            wn = 24 + text_width(n, 11) + 16
            if x + wn > self.w - 4 and x > self.l:
                x, row = self.l, row + 1
            out.append((n, x, row))
            x += wn
        return out

    def legend_below(self, laid, dashed=()):
        o = []
        for i, (n, x, row) in enumerate(laid):
            y = self.h - self.b + 56 + row * 15
            d = ' stroke-dasharray="5 3"' if n in dashed else ""
            o.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{PALETTE[i % len(PALETTE)]}" '
                     f'stroke-width="2"{d}/>')
            o.append(f'<text x="{x + 24}" y="{y}">{_e(n)}</text>')
        return o


def pack_labels(spans, gap=6):
    """The row of each [(x0, x1)] label span, the first row where it meets no other (in input order)."""
    ends, rows = [], []
    for x0, x1 in spans:
        r = next((k for k, e in enumerate(ends) if x0 >= e + gap), len(ends))
        if r == len(ends):
            ends.append(x1)
        else:
            ends[r] = x1
        rows.append(r)
    return rows


def line_plot(series, title, xlabel, ylabel, marks=(), w=640, h=360, dashed=(), signed=False):
    """series: {name: [(x, y), ...]} (y None skipped; signed: the y axis goes below 0 where they do);
    marks: [(x, label)] or [(x, label, tooltip)] drawn
    as vertical dotted lines, their labels in rows above the plot so that none meets another; the
    legend below the x axis."""
    pts = [(x, y) for s in series.values() for x, y in s if y is not None]
    xs = [p[0] for p in pts] + [m[0] for m in marks]
    if not pts:
        pts, xs = [(0, 0), (1, 1)], [0, 1]
    ys = [p[1] for p in pts]
    lo = min(0.0, min(ys) * 1.08) if signed else 0
    ax = _Axes(min(xs), max(xs), lo, max(max(ys) * 1.08, 0.0 if signed else max(ys) * 1.08), w, h)
    marks = sorted((m[0], m[1], m[2] if len(m) > 2 else m[1]) for m in marks)
    spans = []
    for x, label, _ in marks:
        X, tw = ax.X(x), text_width(label, 10)
        spans.append((X + 3, X + 3 + tw) if X + 3 + tw <= w - 4 else (X - 3 - tw, X - 3))
    rows = pack_labels(spans)
    nrows = max(rows, default=-1) + 1
    laid = ax.legend_rows(list(series))
    extra_top, extra_bottom = nrows * 12, 8 + (max((r for _, _, r in laid), default=-1) + 1) * 15
    ax.t += extra_top
    ax.b += extra_bottom
    ax.h += extra_top + extra_bottom
    o = ax.frame(title, xlabel, ylabel)
    for (x, label, tip), (x0, _), row in zip(marks, spans, rows):
        X = ax.X(x)
        o.append(f'<line class="mark" x1="{X:.1f}" x2="{X:.1f}" y1="{ax.t}" '
                 f'y2="{ax.h - ax.b}" stroke="#999" stroke-dasharray="2 3"><title>{_e(tip)}</title></line>')
        o.append(f'<text x="{x0:.1f}" y="{ax.t - extra_top - 2 + row * 12}" fill="#555" font-size="10">'
                 f'<title>{_e(tip)}</title>{_e(label)}</text>')
    for i, (name, s) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        s = sorted((x, y) for x, y in s if y is not None)
        if not s:
            continue
        d = " ".join(f"{'M' if j == 0 else 'L'}{ax.X(x):.1f},{ax.Y(y):.1f}" for j, (x, y) in enumerate(s))
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        o.append(f'<path class="series" d="{d}" fill="none" stroke="{c}" stroke-width="2"{dash}>'
                 f'<title>{_e(name)}</title></path>')
        for x, y in s:
            o.append(f'<circle cx="{ax.X(x):.1f}" cy="{ax.Y(y):.1f}" r="3" fill="{c}">'
                     f'<title>{_e(name)}: size {x}, {y:.2f}</title></circle>')
    o += ax.legend_below(laid, dashed)
    o.append("</svg>")
    return "\n".join(o)


def cdf_plot(series, title, xlabel="RTT (us)", w=640, h=320, dashed=()):
    """series: {name: [(x, F)]} cumulative points (already sorted or not), drawn as steps."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        pts = [(0, 0), (1, 1)]
    ax = _Axes(min(p[0] for p in pts), max(p[0] for p in pts), 0, 1, w, h)
    o = ax.frame(title, xlabel, "fraction of RPCs ≤ x")
    for i, (name, s) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        s = sorted(s)
        if not s:
            continue
        d = [f"M{ax.X(s[0][0]):.1f},{ax.Y(0):.1f}"]
        for x, f in s:
            d.append(f"L{ax.X(x):.1f},{ax.Y(f):.1f}" if len(s) < 12 else
                     f"H{ax.X(x):.1f} V{ax.Y(f):.1f}")
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        o.append(f'<path class="series" d="{" ".join(d)}" fill="none" stroke="{c}" stroke-width="2"{dash}>'
                 f'<title>{_e(name)}</title></path>')
        if len(s) < 12:
            for x, f in s:
                o.append(f'<circle cx="{ax.X(x):.1f}" cy="{ax.Y(f):.1f}" r="3" fill="{c}">'
                         f'<title>{_e(name)}: {x:.1f} us at {f:.2f}</title></circle>')
    o += ax.legend(list(series), dashed)
    o.append("</svg>")
    return "\n".join(o)


def histogram(values, title, xlabel="RTT (us)", bins=20, w=640, h=260):
    vals = sorted(v for v in values if v is not None)
    if not vals:
        vals = [0.0]
    lo, hi = vals[0], vals[-1]
    if hi <= lo:
        hi = lo + 1
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in vals:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    ax = _Axes(lo, hi, 0, max(counts) * 1.1, w, h)
    o = ax.frame(title, xlabel, "RPCs")
    for k, n in enumerate(counts):
        x0, x1 = ax.X(lo + k * width), ax.X(lo + (k + 1) * width)
        y = ax.Y(n)
        o.append(f'<rect class="bar" x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" '
                 f'height="{ax.Y(0) - y:.1f}" fill="{PALETTE[0]}"><title>{lo + k * width:.1f}–'
                 f'{lo + (k + 1) * width:.1f} us: {n}</title></rect>')
    o.append("</svg>")
    return "\n".join(o)


def binned_histograms(series, title, xlabel="RTT (us)", shown=0.995, max_bars=160, w=640, h=260):
    """series: {name: {"from_us", "bin_us", "counts", "above"}} (the client's rtt_hist in us),
    each drawn as the outline of its share of calls per bin, bins merged so that at most max_bars
    span the x range. The range ends where every series holds `shown` of its calls, so a few slow
    outliers do not squeeze the modes into one bar; how many calls lie beyond is in the legend."""
    spans = []
    for v in series.values():
        total = sum(v["counts"]) + v.get("above", 0)
        acc, end = 0, len(v["counts"])
        for i, n in enumerate(v["counts"]):
            acc += n
            if acc >= shown * total:
                end = i + 1
                break
        spans.append((v["from_us"], v["from_us"] + end * v["bin_us"]))
    if not spans:
        spans = [(0.0, 1.0)]
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    if hi <= lo:
        hi = lo + 1
    bin_us = min(v["bin_us"] for v in series.values()) if series else 1.0
    width = max(bin_us, math.ceil((hi - lo) / max_bars / bin_us) * bin_us)
    nbars = max(1, math.ceil((hi - lo) / width))
    shares, names = {}, []
    for name, v in series.items():
        total = sum(v["counts"]) + v.get("above", 0)
        bars, beyond = [0] * nbars, v.get("above", 0)
        for i, n in enumerate(v["counts"]):
            k = int((v["from_us"] + (i + 0.5) * v["bin_us"] - lo) // width)
            if 0 <= k < nbars:
                bars[k] += n
            else:
                beyond += n
        shares[name] = [n / total if total else 0 for n in bars]
        names.append(f"{name} ({beyond} of {total} beyond {lo + nbars * width:.1f} us)" if beyond else name)
    top = max((x for b in shares.values() for x in b), default=1) or 1
    ax = _Axes(lo, lo + nbars * width, 0, top * 1.1, w, h)
    o = ax.frame(title, xlabel, f"share of calls per {width * 1000:.0f} ns")
    for i, (name, b) in enumerate(shares.items()):
        c = PALETTE[i % len(PALETTE)]
        d = [f"M{ax.X(lo):.1f},{ax.Y(0):.1f}"]
        for k, x in enumerate(b):
            d.append(f"V{ax.Y(x):.1f} H{ax.X(lo + (k + 1) * width):.1f}")
        d.append(f"V{ax.Y(0):.1f}")
        o.append(f'<path class="series" d="{" ".join(d)}" fill="{c}" fill-opacity="0.15" stroke="{c}" '
                 f'stroke-width="1.5"><title>{_e(name)}</title></path>')
    o += ax.legend(names)
    o.append("</svg>")
    return "\n".join(o)


# ------------------------------------------------------------------ the RTP diagram (Figure 5)

# Character widths in em of DejaVu Sans, the sans-serif that Linux browsers use (wider than most): the
# lower-case letters one by one, then classes; anything else counts as a capital.
_EM = {**dict(zip("abcdefghijklmnopqrstuvwxyz",
                  (.613, .635, .55, .635, .615, .352, .635, .634, .278, .278, .579, .278, .974, .634, .612, .635,
                   .635, .411, .521, .392, .634, .592, .818, .592, .592, .525))),
       **{c: .636 for c in "0123456789µ+="}, **{c: .32 for c in " .,:;'|!"}, **{c: .39 for c in "()[]/-"},
       "…": 1.0, "I": .295, "J": .295, "M": .863, "W": .989}


def text_width(text, size):
    """The width in px of text at a font size, in DejaVu Sans."""
    return size * sum(_EM.get(c, .75) for c in text)


def fit_label(label, suffix, width, size=10.0, smallest=8.0):
    """(text, font size) of a box label that fits `width` px: label + suffix at the largest size from
    `size` down to `smallest`; else the label cut with an ellipsis (its step id kept) + suffix at the
    smallest size. The box's tooltip keeps the whole label."""
    text = label + suffix
    fs = size
    while fs > smallest and text_width(text, fs) > width:
        fs -= 0.5
    if text_width(text, fs) <= width:
        return text, fs
    head, cut = label.split(" ", 1)[0], label
    while len(cut) > len(head) and text_width(cut + "…" + suffix, fs) > width:
        cut = cut[:-1].rstrip()
    return (cut + "…" if len(cut) > len(head) else head) + suffix, fs

LANES = ("client", "network", "server")


def rtp_diagram(boxes, title, subtitle="", w=700, px_per_us=None, min_h=16, max_total=900, data=None):
    """The round trip path in the manner of the DCE study's Figure 5.

    boxes: [{"lane": client|network|server, "label": str, "us": float or None, "begin": float,
             "rtp": bool, "step": catalog step id (optional)}], begin/us in microseconds on the round
             trip's time axis (top = call start). data: {name: value} written on the <svg> element as
             data-NAME attributes (the case and call it draws), and each box's step as data-step.
    Steps on the path are solid boxes, overlapped steps dashed and drawn beside their lane's path
    column. Heights are proportional to time with a minimum (min_h px) so short steps stay legible;
    the left axis is labelled by the path's cumulative time.
    """
    if not boxes:
        boxes = [{"lane": "client", "label": "no steps", "us": 0, "begin": 0, "rtp": True}]
    # Times rounded to the nanosecond, so that a box that starts where another ends shares its mark
    # (0.15 + 0.14 must meet 0.29, or the boxes overlap).
    boxes = [dict(b, begin=round(b["begin"], 3), end=round(b["begin"] + (b["us"] or 0), 3)) for b in boxes]
    end = max(b["end"] for b in boxes) or 1.0
    # time -> y: piecewise so that every box is at least min_h tall (layout in order of begin)
    top = 62
    scale = px_per_us or max(0.5, min(6.0, (max_total - top - 40) / end))
    marks = sorted({0.0, end} | {b["begin"] for b in boxes} | {b["end"] for b in boxes})
    ypos, y = {}, top
    for i, t in enumerate(marks):
        if i:
            dt = t - marks[i - 1]
            y += dt * scale
        ypos[t] = y
    # stretch so each box has at least min_h: walk boxes in begin order and push later marks down
    for b in sorted(boxes, key=lambda b: (b["begin"], not b["rtp"])):
        t0, t1 = b["begin"], b["end"]
        need = ypos[t0] + min_h - ypos[t1]
        if need > 0:
            for t in marks:
                if t >= t1:
                    ypos[t] += need
    h = int(ypos[end] + 50)
    colx = {"client": 150, "network": 350, "server": 550}
    cw = 150
    attrs = "".join(f' data-{k}="{_e(v)}"' for k, v in (data or {}).items())
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fig rtp" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         f'role="img" {FONT}{attrs}><title>{_e(title)}</title>',
         f'<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>',
         f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{_e(title)}</text>']
    if subtitle:
        o.append(f'<text x="{w / 2:.0f}" y="31" text-anchor="middle" fill="#a00">{_e(subtitle)}</text>')
    for lane, x in colx.items():
        o.append(f'<text class="lane" x="{x}" y="52" text-anchor="middle" font-weight="bold">{lane}</text>')
        o.append(f'<line x1="{x}" x2="{x}" y1="{top}" y2="{h - 40}" stroke="#ddd"/>')
    # time axis (path time)
    o.append(f'<line x1="40" x2="40" y1="{top}" y2="{ypos[end]:.1f}" stroke="#333"/>')
    o.append(f'<text x="36" y="{top - 6}" text-anchor="middle" fill="#333">µs</text>')
    last = -1e9
    for t in marks:
        if ypos[t] - last >= 14:
            o.append(f'<text x="36" y="{ypos[t] + 4:.1f}" text-anchor="end" fill="#555" font-size="9">{t:.1f}</text>'
                     f'<line x1="38" x2="42" y1="{ypos[t]:.1f}" y2="{ypos[t]:.1f}" stroke="#333"/>')
            last = ypos[t]
    prev = None
    for b in sorted(boxes, key=lambda b: b["begin"]):
        if not b["rtp"]:
            continue
        cx = colx.get(b["lane"], colx["network"])
        y0 = ypos[b["begin"]]
        if prev and prev[0] != cx:   # hand-off between columns: an arrow, as Figure 5's interrupts
            o.append(f'<line class="handoff" x1="{prev[0]}" y1="{prev[1]:.1f}" x2="{cx}" y2="{y0:.1f}" '
                     f'stroke="#333" stroke-width="1.5" marker-end="url(#arr)"/>')
        prev = (cx, ypos[b["end"]])
    o.insert(3, '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
                'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>')
    for b in boxes:
        cx = colx.get(b["lane"], colx["network"])
        x = cx - cw / 2 if b["rtp"] else cx + cw / 2 - 8
        bw = cw if b["rtp"] else cw * 0.62
        if not b["rtp"] and b["lane"] == "server":
            x = cx - cw / 2 - bw + 8
        y0 = ypos[b["begin"]]
        y1 = ypos[b["end"]]
        us = "" if b["us"] is None else f" {b['us']:.2f} µs"
        style = ('fill="#dbe9f6" stroke="#1f4e79" stroke-width="1.6"' if b["rtp"] else
                 'fill="#fafafa" stroke="#888" stroke-width="1.2" stroke-dasharray="4 3"')
        cls = "step rtp" if b["rtp"] else "step overlapped"
        tip = b.get("tip") or f'{b["label"]}{us}' + ("" if b["rtp"] else " (overlapped: not on the round trip path)")
        step = f' data-step="{_e(b["step"])}"' if b.get("step") else ""
        o.append(f'<g class="{cls}"{step}><title>{_e(tip)}</title>'
                 f'<rect x="{x:.1f}" y="{y0:.1f}" width="{bw:.1f}" height="{max(y1 - y0, min_h - 2):.1f}" '
                 f'rx="2" {style}/>')
        label, fs = fit_label(b["label"], us if b["rtp"] else "", bw - 6)
        o.append(f'<text x="{x + bw / 2:.1f}" y="{y0 + min(max(y1 - y0, min_h - 2), 40) / 2 + 4:.1f}" '
                 f'text-anchor="middle" font-size="{fs}" fill="{"#000" if b["rtp"] else "#555"}">'
                 f'{_e(label)}</text></g>')
    ly = h - 22
    o.append(f'<rect x="60" y="{ly - 10}" width="22" height="12" fill="#dbe9f6" stroke="#1f4e79"/>'
             f'<text x="88" y="{ly}">on the round trip path</text>'
             f'<rect x="260" y="{ly - 10}" width="22" height="12" fill="#fafafa" stroke="#888" stroke-dasharray="4 3"/>'
             f'<text x="288" y="{ly}">overlapped (in parallel, not on the path)</text>')
    o.append("</svg>")
    return "\n".join(o)
