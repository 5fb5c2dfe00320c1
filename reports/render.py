"""A Report as one self-contained HTML page and as Markdown.

    to_html(rep)       the first section open, every other folded (<details>) under a table of contents;
                       sections of one item per case fold each item too; fits a 1400-pixel-wide window
    to_markdown(rep)   the same sections, tables and figures (fig-NAME.svg beside it)
"""
from __future__ import annotations

import re
from html import escape

from .objects import Figure, Report, Table

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1340px;padding:.8em 1.4em;
color:#222}
h1{font-size:1.5em;border-bottom:2px solid #1f4e79;padding-bottom:.2em;margin:.3em 0 .5em}
h2{font-size:1.2em;color:#1f4e79;display:inline;margin:0}
h3{font-size:1.02em;margin:.8em 0 .3em}
section.open>h2{display:block;margin-top:1em}
details.sec{margin:.5em 0;border-top:1px solid #dde}
details.sec>summary{cursor:pointer;padding:.45em 0}
details.item{margin:.2em 0 .2em 1em}
details.item>summary{cursor:pointer;font-size:.95em}
table{border-collapse:collapse;font-size:12px;margin:.4em 0;max-width:100%}
th,td{border:1px solid #ccc;padding:2px 5px;text-align:right;vertical-align:top}
th{background:#eef3f8;font-weight:600}
th.t{text-align:left}
td:first-child,td.t{text-align:left}
td.t{overflow-wrap:anywhere;min-width:4em}
tr.sum td{font-weight:bold;background:#f7f7f7}
.src{font-size:11px;color:#666;margin:.2em 0 1em;overflow-wrap:anywhere}
.note{font-size:13px;color:#333;max-width:1200px}
p.lead{font-size:14px}
.figs{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0 0 1em;max-width:100%}
svg{max-width:100%;height:auto}
nav.toc{font-size:13px;margin:.3em 0 .8em}
nav.toc a{margin-right:.9em;white-space:nowrap}
nav.items{font-size:12px;margin:.3em 0}
nav.items a{margin-right:.7em;white-space:nowrap}
"""

# Opens the folded sections and items that hold the target of a link (a table-of-contents entry).
SCRIPT = """<script>
function openTarget(){const id=decodeURIComponent(location.hash.slice(1));const el=id&&document.getElementById(id);
for(let p=el;p;p=p.parentElement){if(p.tagName==='DETAILS')p.open=true;}if(el)el.scrollIntoView();}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);
</script>"""

SUM_ROWS = ("sum (calculated)", "measured (untraced p50)", "% error", "measured noise (± %)")


def slug(t):
    return re.sub(r"[^a-z0-9]+", "-", t.lower()).strip("-")


def _fmt(v, nd=2):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _is_num(v):
    return bool(re.fullmatch(r"[-+]?[\d.,]+( [+-] -?[\d.]+ ns/B)?", str(v)))     # a cost per byte may fall


def _header(c):
    """A column name that may wrap after its underscores and slashes (a narrow table)."""
    return "".join(escape(p) + ("<wbr>" if p in "_/" else "") for p in re.split(r"([_/])", c))


def _numeric(t, c):
    """A column of numbers (right-aligned, its header too)."""
    return all(_is_num(r.get(c, "")) or _fmt(r.get(c, "")) == "" for r in t.rows)


def _item_id(it):
    return it.name if isinstance(it, Figure) else "t-" + slug(it.title)


def _figure(f):
    links = "".join(f'<br><a class="call" href="{escape(h)}" download>{escape(t)}</a>' for t, h in f.links)
    m = re.match(r'<svg[^>]* width="(\d+)', f.svg)
    size = f' style="max-width:{m.group(1)}px"' if m else ""     # the caption wraps at the figure's width
    return (f'<figure id="{escape(f.name)}">{f.svg}<figcaption class="src"{size}>source: {escape(f.source)}'
            + (f'<br><span class="note">{escape(f.note)}</span>' if f.note else "") + links + "</figcaption></figure>")


def _table(t, heading=True):
    o = [(f'<h3 id="{_item_id(t)}">{escape(t.title)}</h3>' if heading else "") + "<table><thead><tr>"
         + "".join(f"<th{'' if _numeric(t, c) else ' class=t'}>{_header(c)}</th>" for c in t.columns)
         + "</tr></thead><tbody>"]
    for r in t.rows:
        summ = str(r.get(t.columns[0], "")) in SUM_ROWS
        o.append(f'<tr{" class=sum" if summ else ""}>' + "".join(
            f'<td{"" if _is_num(r.get(c, "")) else " class=t"}>{escape(_fmt(r.get(c, "")))}</td>'
            for c in t.columns) + "</tr>")
    o.append(f'</tbody></table><div class="src">source: {escape(t.source)}'
             + (f"<br>{escape(t.note)}" if t.note else "") + "</div>")
    return "".join(o)


def _items(s):
    o, figs = [], []
    for it in s.items + [None]:
        if isinstance(it, Figure) and not s.fold_items:
            figs.append(it)
            continue
        if figs:
            o.append('<div class="figs">' + "".join(_figure(f) for f in figs) + "</div>")
            figs = []
        if s.fold_items and isinstance(it, (Figure, Table)):
            body = _figure(it) if isinstance(it, Figure) else _table(it, heading=False)
            tid = f' id="{escape(_item_id(it))}"' if isinstance(it, Table) else ""
            o.append(f'<details class="item"{tid}><summary>{escape(it.title)}</summary>{body}</details>')
        elif isinstance(it, Table):
            o.append(_table(it))
        elif isinstance(it, str):
            o.append(f'<p class="note">{escape(it)}</p>')
    return o


def to_html(rep: Report, title: str = "") -> str:
    name = title or rep.run
    o = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         '<meta name="viewport" content="width=device-width, initial-scale=1">',
         f"<title>rpcscope report: {escape(name)}</title>", f"<style>{CSS}</style></head><body>",
         f"<h1>rpcscope report: {escape(name)}</h1>",
         '<nav class="toc">Contents: ' + " ".join(f'<a href="#{slug(s.title)}">{escape(s.title)}</a>'
                                                 for s in rep.sections) + "</nav>"]
    for s in rep.sections:
        sid = slug(s.title)
        if not s.folded:
            o.append(f'<section class="open"><h2 id="{sid}">{escape(s.title)}</h2>')
            o += _items(s)
            o.append("</section>")
            continue
        o.append(f'<details class="sec"><summary><h2 id="{sid}">{escape(s.title)}</h2></summary>')
        named = [it for it in s.items if isinstance(it, (Figure, Table))]
        if len(named) > 3:
            o.append('<nav class="items">In this section: ' + " ".join(
                f'<a href="#{escape(_item_id(it))}">{escape(it.title)}</a>' for it in named) + "</nav>")
        o += _items(s)
        o.append("</details>")
    o.append(SCRIPT)
    o.append("</body></html>")
    return "\n".join(o)


def to_markdown(rep: Report, title: str = "") -> str:
    o = [f"# rpcscope report: {title or rep.run}", "",
         "Figures are the `fig-*.svg` files next to this file; `index.html` is the same report in one file.", ""]
    for s in rep.sections:
        o += [f"## {s.title}", ""]
        for it in s.items:
            if isinstance(it, Table):
                o += [f"### {it.title}", "", "| " + " | ".join(it.columns) + " |",
                      "|" + "|".join("---" for _ in it.columns) + "|"]
                for r in it.rows:
                    o.append("| " + " | ".join(_fmt(r.get(c, "")).replace("|", "\\|") for c in it.columns) + " |")
                o += ["", f"*source: {it.source}*" + (f"  \n{it.note}" if it.note else ""), ""]
            elif isinstance(it, Figure):
                o += [f"![{it.title}](fig-{it.name}.svg)", "", f"*source: {it.source}*"
                      + (f"  \n{it.note}" if it.note else "")
                      + "".join(f"  \n[{t}]({h})" for t, h in it.links), ""]
            else:
                o += [it, ""]
    return "\n".join(o)
