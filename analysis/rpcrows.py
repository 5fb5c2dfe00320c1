"""The per-RPC tables of a case (analysis/rpcs.py rebuilds them): one Row per catalog step and extra row,
each RPC's status (MEASURED, NOT_APPLICABLE, MISSING), and CaseRPCs, which holds them and charges each
step the probe cost of the events inside it.
"""
import collections
import ctypes
import ctypes.util

import numpy as np

from rpcscope.tracepoints import EVENTS, SPANS, SPLIT, STEPS, span_of, span_steps, step

from .rpckernel import CLASS_UST, COST_COLUMNS, _Costs, _ProbeEvents
from .traceread import KIND

MEASURED, NOT_APPLICABLE, MISSING = 0, 1, 2

_SIDE_OF = {s["id"]: s["side"] for s in STEPS}
# Rows beside the catalog's steps: the parts of a split step (the catalog's [split]), and spans of user
# marks that cross several steps (its [spans]): name -> (side, the step whose conditions rule it out or
# None, title).
EXTRA_ROWS = {
    **{name: (_SIDE_OF[part["of"]], part["of"], part["name"]) for name, part in SPLIT.items()},
    **{name: (sp["side"], sp.get("applies"), sp["name"]) for name, sp in SPANS.items()},
}
# Per side its steps, the parts of its split steps and its spans; the call's span (the RTT row) last.
ROW_ORDER = [name for side in ("client", "server") for name in
             [s["id"] for s in STEPS if s["side"] == side] +
             [n for n, p in SPLIT.items() if _SIDE_OF[p["of"]] == side] +
             [n for n, sp in SPANS.items() if sp["side"] == side and sp["kind"] != "call"]] + \
    [n for n, sp in SPANS.items() if sp["kind"] == "call"]

# The call's span (the catalog's [spans] of kind call, the RTT row): a call is measured from the first
# begin mark of its first step to the last end mark of its last one.
CALL_ROW = span_of("call")
CALL_FIRST, CALL_LAST = span_steps(CALL_ROW)
CALL_BEGIN_MARK, CALL_END_MARK = step(CALL_FIRST)["user_events"][0], step(CALL_LAST)["user_events"][-1]

_STEP = {s["id"]: s for s in STEPS}
# event name (without provider) -> (step id, mark)
_MARK = {e["name"].split(":", 1)[1]: (e["step"], e["mark"]) for e in EVENTS}

class Row:
    """One step (or extra row) over the RPCs of a case: per RPC its begin, end, duration, number
    of occurrences and status; the occurrences themselves as flat arrays (occurrences(r)); the
    probe cost of the tracepoints inside them (cost, tracepoints), charged on first use with the
    run's calibration as it is then (CaseRPCs.charge)."""

    def __init__(self, name, n, owner=None):
        self.name = name
        self._owner = owner
        self.begin = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.dur = np.full(n, np.nan)
        self.count = np.zeros(n, np.int32)
        self.status = np.full(n, MISSING, np.int8)
        self.reasons = collections.Counter()
        self.why = np.full(n, None, object)      # per RPC: why the step is missing
        # Occurrences of the measured RPCs, in RPC then time order: RPC index, begin, end, CPU.
        self.occ_r = np.zeros(0, np.int64)
        self.occ_b = self.occ_e = self.occ_cpu = np.zeros(0, np.int64)
        # The probe charge: intervals whose events cost the step (sign -1: taken back, see the RTT).
        self.charge_intervals = None             # (r, cpu, b, e, sign) arrays; None: the occurrences
        self._cost = np.zeros(n)
        self._tracepoints = np.zeros(n, np.int32)
        self._user_events = np.zeros(n, np.int32)

    @property
    def cost(self):
        if self._owner is not None:
            self._owner.charge()
        return self._cost

    @property
    def tracepoints(self):
        if self._owner is not None:
            self._owner.charge()
        return self._tracepoints

    @property
    def user_events(self):
        """Per RPC: how many of its tracepoints are user events (the rest are kernel events)."""
        if self._owner is not None:
            self._owner.charge()
        return self._user_events

    @property
    def corrected(self):
        return self.dur - self.cost

    def occurrences(self, r):
        """[(begin, end, cpu)] of RPC r ([] where the step was not measured)."""
        lo, hi = self.occ_r.searchsorted(r, "left"), self.occ_r.searchsorted(r, "right")
        return list(zip(self.occ_b[lo:hi].tolist(), self.occ_e[lo:hi].tolist(), self.occ_cpu[lo:hi].tolist()))


def incomplete(rpcs):
    """(mask of RPCs with every applicable catalog step measured, Counter of why the
    others are not: the first missing step in catalog order and its reason)."""
    ok = np.ones(len(rpcs), bool)
    why = collections.Counter()
    for s in STEPS:
        row = rpcs.rows[s["id"]]
        m = ok & (row.status == MISSING)
        for w in row.why[m]:
            why[f"{s['id']}: {w}"] += 1
        ok &= row.status != MISSING
    return ok, why


class CaseRPCs:
    """The RPCs of one case: call ids and one Row per step. The events stay in the cache: the probe
    costs are charged a window of RPCs at a time (windows: [(first RPC, end RPC, lo ns, hi ns)], the
    time range each window's events were read from)."""

    def __init__(self, case, call_ids, rows, excluded, problems, conditions, threads, windows, roles, kernel):
        self.case = case
        self.call_ids = call_ids
        self.rows = rows
        self.excluded = excluded
        self.problems = problems
        self.conditions = conditions
        self.threads = threads
        self.windows = windows
        self._roles, self._kernel = roles, kernel
        self._window_events = None          # (window index, _ProbeEvents) of the last window costed
        self._charged_cal = None

    def __len__(self):
        return len(self.call_ids)

    @property
    def has_kernel(self):
        """Whether the case was rebuilt with its kernel trace."""
        return self._kernel

    def _calibration(self):
        return {r: self.case.calibration(r) for r in ("client", "server")}

    @property
    def probe_costs_available(self):
        """Whether the run has a probe calibration (else every cost is 0)."""
        return any(c.get("ust_event_ns") is not None for c in self._calibration().values())

    def window_of(self, r):
        """The index of the window RPC r was rebuilt in."""
        return int(np.searchsorted([w[0] for w in self.windows], r, "right") - 1)

    def window_costs(self, k, kernel=None):
        """The probe cost of the events on each CPU (_Costs) in window k's time range, with the run's
        calibration as it is now: analysis/probe.py walks the cases before their calibration exists,
        the tables are charged after. kernel: the window's kernel events, when already read."""
        if self._window_events is None or self._window_events[0] != k:
            _, _, lo, hi = self.windows[k]
            ust = self.case.span("ust", lo, hi, COST_COLUMNS)
            sel = (np.asarray(ust.kind) == KIND["user"]) & np.isin(np.asarray(ust.tid), list(self._roles))
            ust = ust.select(sel)
            server = [t for t, rl in self._roles.items() if rl == "server"]
            uroles = np.isin(np.asarray(ust.tid), server).astype(np.int64)
            if self._kernel and kernel is None:
                kernel = self.case.span("kernel", lo, hi, COST_COLUMNS)
            self._window_events = (k, _ProbeEvents(self.case, ust, uroles, kernel if self._kernel else None))
        return _Costs(self._window_events[1], self._calibration())

    def charge(self):
        """Fill every row's cost and tracepoints (see the module docstring) with the current calibration,
        a window at a time (an RPC's intervals all lie in its window's time range)."""
        cal = self._calibration()
        if cal == self._charged_cal:
            return
        n = len(self)
        for row in self.rows.values():
            row._cost, row._tracepoints, row._user_events = np.zeros(n), np.zeros(n, np.int32), np.zeros(n, np.int32)
        for k, (r0, r1, _, _) in enumerate(self.windows):
            costs = self.window_costs(k)
            for row in self.rows.values():
                if row.charge_intervals is not None:
                    r, cpu, b, e, sign = row.charge_intervals
                else:
                    r, cpu, b, e = row.occ_r, row.occ_cpu, row.occ_b, row.occ_e
                    sign = np.ones(len(r))
                m = (r >= r0) & (r < r1)
                if not m.any():
                    continue
                cost, cnt = costs.charge(cpu[m], b[m], e[m])
                user = costs.class_counts(cpu[m], b[m], e[m])[:, CLASS_UST]
                row._cost += np.bincount(r[m], cost * sign[m], minlength=n)[:n]
                row._tracepoints += np.bincount(r[m], cnt * sign[m], minlength=n)[:n].astype(np.int32)
                row._user_events += np.bincount(r[m], user * sign[m], minlength=n)[:n].astype(np.int32)
        self._charged_cal = cal
        self._window_events = None
        _trim()

    def nbytes(self):
        """Memory the per-RPC tables take: every row's per-RPC arrays, occurrences and charge intervals."""
        total = self.call_ids.nbytes
        for row in self.rows.values():
            arrays = [row.begin, row.end, row.dur, row.count, row.status, row.why, row._cost, row._tracepoints,
                      row._user_events, row.occ_r, row.occ_b, row.occ_e, row.occ_cpu, *(row.charge_intervals or ())]
            total += sum(np.asarray(a).nbytes for a in arrays)
        return total

    def release(self):
        """Let go of the last window's events: memory then holds the tables alone."""
        self._window_events = None

    def __getstate__(self):
        # Sent by an analysis worker (workers.py) without its case and the events of its last window:
        # the receiver has the case (attach()) and reads a window's events again when it needs them.
        return dict(self.__dict__, case=None, _window_events=None)

    def attach(self, case, kernel=True):
        """Adopt an unpickled CaseRPCs as case's reconstruction (reconstruct() then returns it)."""
        self.case = case
        case.__dict__.setdefault("_reconstructed", {})[kernel] = self
        return self


def _trim():
    """Give the heap's free pages back to the system (glibc's malloc_trim): the windows' arrays are
    freed between long-lived pieces of the tables, and the free pages between them would otherwise
    stay resident, window after window."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None                 # not glibc: nothing to trim


_LIBC = _libc()
