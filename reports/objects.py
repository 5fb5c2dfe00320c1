"""The report's objects: a Report of Sections, each a list of Tables, Figures and paragraphs (str).

    from rpcscope.reports.objects import Figure, Report, Section, Table
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    title: str
    columns: list
    rows: list
    source: str
    note: str = ""


@dataclass
class Figure:
    name: str            # file stem: fig-NAME.svg
    title: str
    svg: str
    source: str
    note: str = ""
    case: str = ""       # the case it draws (one case per figure: keyed by case id, never by size)
    links: list = field(default_factory=list)   # [(text, href relative to the report)]


@dataclass
class Section:
    title: str
    items: list = field(default_factory=list)   # Table | Figure | str (a paragraph)
    folded: bool = True         # in the HTML page, a <details> closed until opened
    fold_items: bool = False    # each table and figure folded on its own too (sections of one item per case)


@dataclass
class Report:
    run: str
    sections: list
    headline: dict

    def figures(self):
        return [i for s in self.sections for i in s.items if isinstance(i, Figure)]

    def tables(self):
        return [i for s in self.sections for i in s.items if isinstance(i, Table)]
