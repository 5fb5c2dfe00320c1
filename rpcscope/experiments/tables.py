"""What every experiment shares: its runs interleaved and repeated, each cell's median and spread,
ratios taken round by round within one run, the paper's figures (peers/data/), and the output.

A sweep makes `repeats` rounds; a round runs every cell once, the systems taking turns (the order
rotates from round to round), so that a slow spell of the machine touches every system alike. A
cell's figure is the median over its rounds; its spread is 1.4826 x the median absolute deviation
of the rounds' figures, as % of the median (a standard deviation that a burst does not decide). A
ratio between two cells is taken within each round, then its median over the rounds.
"""
import csv
import dataclasses
import statistics
import sys
import time

from tqdm import tqdm

from .. import ROOT
from ..output import UserError
from .systems import run_client, supports

DATA = ROOT / "peers" / "data"


@dataclasses.dataclass(frozen=True)
class Spec:
    """One cell of a table: a system's client run with one workload."""
    system: str
    transport: str
    proc: str
    size: int
    threads: int = 1

    @property
    def label(self):
        return f"{self.system} {self.transport}"


@dataclasses.dataclass
class Cell:
    spec: Spec
    runs: list          # one Result per round, in round order (None: not run in that round)
    na: str = ""        # why the system cannot run it ("" if it can)

    @property
    def ok(self):
        return bool(self.na) or (bool(self.runs) and all(r is not None and r.ok for r in self.runs))

    @property
    def error(self):
        for r in self.runs:
            if r is None:
                return "not run"
            if not r.ok:
                return r.error
        return ""

    def values(self, field):
        return [getattr(r, field) for r in self.runs if r is not None and r.ok]

    def median(self, field):
        v = self.values(field)
        return statistics.median(v) if v else None

    def spread(self, field):
        return spread_pct(self.values(field))

    def as_json(self):
        d = {"system": self.spec.system, "transport": self.spec.transport, "proc": self.spec.proc,
             "size": self.spec.size, "threads": self.spec.threads, "ok": self.ok}
        if self.na:
            d["na"] = self.na
            return d
        d.update({"p50_us": self.median("p50_us"), "p50_spread_pct": self.spread("p50_us"),
                  "mean_us": self.median("mean_us"), "min_us": min(self.values("min_us"), default=None),
                  "max_us": max(self.values("max_us"), default=None), "p99_us": self.median("p99_us"),
                  "calls_per_s": self.median("calls_per_s"), "calls_per_s_spread_pct": self.spread("calls_per_s"),
                  "first_call_us": self.median("first_call_us"),
                  "checked_calls": sum(r.calls for r in self.runs if r is not None),
                  "errors": sum(r.errors for r in self.runs if r is not None),
                  "mismatches": sum(r.mismatches for r in self.runs if r is not None),
                  "rounds": [dataclasses.asdict(r) for r in self.runs if r is not None]})
        if self.error:
            d["error"] = self.error
        return d


def spread_pct(values):
    if not values:
        return None
    med = statistics.median(values)
    if not med:
        return 0.0
    return 1.4826 * statistics.median(abs(x - med) for x in values) * 100 / med


def ratio(a, b, field="p50_us"):
    """(median, spread %) of a's figure over b's, round by round (rounds where both ran)."""
    rs = [x.__getattribute__(field) / y.__getattribute__(field) for x, y in zip(a.runs, b.runs)
          if x is not None and y is not None and x.ok and y.ok and getattr(y, field)]
    if not rs:
        return None, None
    return statistics.median(rs), spread_pct(rs)


class Budget:
    """An experiment's bound in time: every run checks it before it starts."""

    def __init__(self, minutes):
        self.minutes = minutes
        self.deadline = time.monotonic() + minutes * 60

    def check(self):
        if time.monotonic() > self.deadline:
            raise UserError(f"the experiment ran out of its time budget ({self.minutes:g} min, --max-minutes): "
                            f"give it more, or fewer --repeats or --calls")


def sweep(servers, specs, repeats, calls, warmup, budget, progress, max_seconds=30.0, sockperf_seconds=1.0,
          wait="select", cells=None, round_offset=0):
    """Run every spec once per round, for `repeats` rounds, the order rotating; cells by spec (the
    ones given are extended: a sweep per placement adds to the same cells). calls: per thread, a
    number or a function of the spec."""
    cells = cells if cells is not None else {}
    runnable = []
    for s in dict.fromkeys(specs):
        if s not in cells:
            cells[s] = Cell(spec=s, runs=[], na=supports(s.system, s.transport, s.proc, s.size) or "")
        if not cells[s].na:
            runnable.append(s)
    for rnd in range(repeats):
        k = (rnd + round_offset) % max(1, len(runnable))
        for s in runnable[k:] + runnable[:k]:
            budget.check()
            progress.set_postfix_str(f"{s.label} {s.proc} {s.size} x{s.threads}", refresh=False)
            n = calls(s) if callable(calls) else calls
            r = run_client(servers, s.system, s.transport, s.proc, s.size, n, warmup, threads=s.threads,
                           max_seconds=max_seconds, sockperf_seconds=sockperf_seconds, wait=wait)
            cells[s].runs.append(r)
            progress.update(1)
    return cells


def count_runs(specs, repeats):
    return sum(1 for s in dict.fromkeys(specs) if not supports(s.system, s.transport, s.proc, s.size)) * repeats


def progress_bar(total, desc, quiet):
    return tqdm(total=total, desc=desc, unit="run", disable=quiet or not sys.stderr.isatty())


def paper(name):
    """(rows as dicts of strings, the header comment) of peers/data/NAME.csv."""
    path = DATA / name
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UserError(f"cannot read the paper's table {path}: {e.strerror}") from None
    note = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    rows = list(csv.DictReader(line for line in lines if line.strip() and not line.startswith("#")))
    return rows, note


def fmt(v, digits=1, unit=""):
    if v is None or v == "":
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.{digits}f}{unit}"


def cell_text(cell, field="p50_us", digits=1):
    """'12.3 ±4%' (median and spread), 'n/a' for a system that cannot, 'FAILED' for a failed run."""
    if cell is None:
        return "-"
    if cell.na:
        return "n/a"
    if not cell.ok:
        return "FAILED"
    if len(cell.values(field)) < 2:
        return f"{cell.median(field):.{digits}f}"
    return f"{cell.median(field):.{digits}f} ±{cell.spread(field):.0f}%"


def text_table(rows, columns, say=print):
    """Rows of strings, aligned (numbers right), with a header rule, a line at a time to say."""
    widths = [max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns]
    say("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    say("  ".join("-" * w for w in widths))
    for r in rows:
        cells = []
        for c, w in zip(columns, widths):
            v = str(r.get(c, ""))
            cells.append(v.rjust(w) if v[:1].isdigit() or v[:1] == "-" else v.ljust(w))
        say("  ".join(cells).rstrip())


def failures(cells):
    """Every cell that should have run and did not, or whose results did not check: (label, error)."""
    return [(f"{c.spec.label} {c.spec.proc} {c.spec.size} x{c.spec.threads}", c.error)
            for c in cells.values() if not c.ok]
