"""The DCE study's Table 2 as data: calculated RTT = sum over its rows of count x unit cost.

The table (analysis/data/, transcribed from the study; see its README) gives each step on the
round-trip path of a one-packet call over 10 Mbit/s Ethernet its unit cost and its count at
request sizes 0, 1392 and 4016. Adding the rows again checks the transcription against the
paper's printed Summation row, and puts the paper's figures beside rpcscope's in the reports.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .model import percent_error

DATA = Path(__file__).resolve().parent / "data"
TABLE = DATA / "dce_table2_null_1392_4016.csv"
SUMMARY = DATA / "dce_table2_summary.csv"
SIZES = (0, 1392, 4016)


@dataclass(frozen=True)
class PaperRow:
    device: str
    step: str
    term: str
    unit_us: float
    counts: tuple          # one count per SIZES


@dataclass(frozen=True)
class PaperSize:
    size: int
    calculated_us: float          # the rows added up here
    printed_calculated_us: float  # the paper's Summation row
    measured_us: float
    error_pct: float              # (Measured - the rows' sum) x 100 / Measured
    printed_error_pct: float


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")))


def table2():
    """The table's rows, in the paper's order."""
    return [PaperRow(r[0], r[1], r[2], float(r[3]), tuple(int(x) for x in r[4:7])) for r in _rows(TABLE)]


def summary():
    """{size: (printed calculated, measured, printed % error)} for every column the paper prints."""
    rows = _rows(SUMMARY)
    return {int(r[0]): (float(r[1]), float(r[2]), float(r[3])) for r in rows[1:]}


def sums(rows=None):
    """The paper's three columns added up: [PaperSize]."""
    rows = rows or table2()
    printed = summary()
    out = []
    for i, z in enumerate(SIZES):
        calc = sum(r.unit_us * r.counts[i] for r in rows)
        pc, meas, perr = printed[z]
        out.append(PaperSize(z, calc, pc, meas, percent_error(meas, calc), perr))
    return out


def rounding_us(rows=None):
    """How far rounding every row's unit cost to the microsecond can move a column's sum: half a
    microsecond per counted row."""
    rows = rows or table2()
    return [0.5 * sum(r.counts[i] for r in rows) for i in range(len(SIZES))]
