"""A run directory as the analysis sees it (collectors/README.md, format 1).

    from rpcscope.analysis.run import load_run
    run = load_run("runs/NAME")
    for case in run.cases:
        case.conditions("client"), case.conditions("server")   # catalog not_applicable conditions
        ust, kernel = case.ust(), case.kernel()                  # traceread.Events (cached)
        case.roles(ust)                                          # {tid: "client" | "server"}

All decoding goes through traceread; this module only knows the layout of a run,
which process is which, and the conditions a case ran under.
"""
import concurrent.futures
import json
import os
import pathlib

import numpy as np

from rpcscope.packets import request_body_bytes, window_count  # noqa: F401  (re-exported)
from rpcscope.rundir import ManifestError, RunDir, case_factors, in_situ_calibrations

from . import timeline, tracepack, traceread

ONEWAY_PROCS = {"courier_oneway"}


class RunError(ManifestError):
    """A directory that is not a run (no, an unreadable or a damaged manifest: rpcscope/rundir.py)."""


def level_rounds_p50s(case_meta, kind):
    """A case's rounds' p50s of one kind (manifest cases[].repeats), of the rounds that agree with the
    kept one where the capture says which (its sweeps: the host's speed level the case's figures come
    from; collectors/capture.py choose_sweep), else of every round (a capture that does not say).
    Where the runs took turns (capture --turns), every round agrees, and each p50 is taken
    over the case's round factor (case_round_factors) times the kept round's."""
    rep = case_meta.get("repeats") or {}
    p50s = rep.get(f"{kind}_p50_ns") or []
    factor = case_round_factors(case_meta)
    if factor and len(factor) >= len(p50s):
        p50s = [x * factor[rep["kept_round"]] / factor[r] for r, x in enumerate(p50s)]
    agreeing = rep.get("agreeing_rounds")
    return [p50s[r] for r in agreeing if r < len(p50s)] if agreeing else list(p50s)


def case_round_factors(case_meta):
    """Where the case's runs took turns (capture --turns; manifest cases[].repeats.turns), how fast the
    host ran the case in each round: exp of the mean over its kinds (untraced, clock, traced) of
    ln(p50 / the kind's median over the rounds); 1.05 a round whose runs of the case all took 5 %
    longer. Else None. Why per case, not one factor a round (capture.py round_speeds, kept in the
    manifest): a round's moments move the sizes unlike each other (over UDP, in the three fastest
    rounds of one capture, 24096 ran 4-8 % faster still and 0 3-5 % slower than the round's factor),
    so one factor a round leaves 3-6 % of noise at those sizes. The kinds of a case take turns side by
    side, so what moves them all is the host's; what moves one against the others is what the figures
    are about."""
    rep = case_meta.get("repeats") or {}
    if not rep.get("turns") or rep.get("kept_round") is None:
        return None
    p50s = {("case", k): v for k, v in rep.items() if k.endswith("_p50_ns") and v and all(v)}
    if min((len(v) for v in p50s.values()), default=0) < 2:
        return None
    return case_factors(p50s)["case"]


# A case's figure of one kind is the median of its speed level's rounds when at least this many ran in
# that level (level_p50_ns), else the kept round's own.
LEVEL_MEDIAN_ROUNDS = 3


def level_p50_ns(case_meta, kind):
    """The median of a case's rounds' p50s of one kind in the kept round's speed level
    (level_rounds_p50s), or None where fewer than LEVEL_MEDIAN_ROUNDS ran there or the capture did
    not say which rounds agree. Why: one round's p50 moves by 0.5-1.6 % (rms, per size) from the median
    of its level's rounds, and its traced minus untraced p50 by 0.8-1.5 % (over 71 settled transports
    with three rounds agreeing): as much as the model's goal, and noise the model cannot tell from a
    unit cost."""
    if not (case_meta.get("repeats") or {}).get("agreeing_rounds"):
        return None
    p50s = level_rounds_p50s(case_meta, kind)
    return float(np.median(p50s)) if len(p50s) >= LEVEL_MEDIAN_ROUNDS else None


def _half_spread_pct(case_meta, p50s):
    """Half the spread of p50s as % of the case's untraced p50; None with fewer than two."""
    u = (case_meta.get("untraced") or {}).get("p50")
    return 100 * (max(p50s) - min(p50s)) / 2 / u if len(p50s) > 1 and u else None


def traced_noise_pct(case_meta):
    """How far one traced run of a case moves from the next identical one: half the spread of its
    rounds' traced p50s in the kept round's speed level (level_rounds_p50s), as % of its untraced p50.
    Where the runs took turns (capture --turns), the rounds' p50s over the case's round factors.
    The report and `rpcscope run` show it beside each case."""
    return _half_spread_pct(case_meta, level_rounds_p50s(case_meta, "traced"))


def untraced_noise_pct(case_meta):
    """How far Measured, the untraced figure of a case (the kept round's p50), moves between identical
    runs: half the spread of the rounds in the kept round's speed level, as % of its p50, where
    LEVEL_MEDIAN_ROUNDS or more ran there; else of every round of the case, for how far one run moves
    is then shown only by all of them. Why: a capture that never settles keeps one or two rounds that
    agree within 3 % a size, and their spread can say "Measured moves by a median 1.1 %" while the
    case's rounds spread by a standard deviation of 9-11 %. Where the runs took turns (capture --turns),
    every round is in the level, each p50 over the case's round factor (level_rounds_p50s)."""
    p50s = level_rounds_p50s(case_meta, "untraced")
    if len(p50s) < LEVEL_MEDIAN_ROUNDS:
        p50s = (case_meta.get("repeats") or {}).get("untraced_p50_ns") or []
    return _half_spread_pct(case_meta, p50s)


SLEEPS_SAME_PATH = 0.5   # sleeps per call: closer than this, the median call of both runs blocked alike
# IPIs per call: an interrupt-borne wake-up costs this VM ~12 us, so a fifth of the calls
# taking one moves the p50 (TCP 4016: 0.32 a call and +2 us; traced runs get up to 0.11 from the tracers)
IPI_SAME_PATH = 0.2


def _same_path_bound(key):
    """The difference per call within which a count of sleeps_per_call ("client", "server", "client_ipi",
    "server_ipi") says the same path."""
    return IPI_SAME_PATH if key.endswith("_ipi") else SLEEPS_SAME_PATH


def same_path(a, b):
    """Whether two runs' sleeps_per_call (collectors/capture.py) say they blocked in the same waits and
    were woken alike (within SLEEPS_SAME_PATH and IPI_SAME_PATH a call); False where either is missing."""
    if not a or not b:
        return False
    return all(abs(a[k] - b[k]) < _same_path_bound(k) for k in ("client", "server", "client_ipi", "server_ipi")
               if k in a and k in b)


def path_shape(case_meta):
    """The kept round's sleeps per call, untraced and traced (collectors/capture.py sleeps_per_call: the
    client's and the server's voluntary context switches per call), and whether the two runs blocked
    in the same waits and were woken alike: {"untraced": "C/S", "traced": "C/S", "same": bool} (and
    "untraced_ipi", "traced_ipi": the IPIs per call the client's and the server's CPU got, where the
    capture counted them), or None where the capture predates the counts. A run that slept more or
    less often than the traced one, or whose wake-ups came by interrupt where the traced run's did not,
    took another path (a fragment or reply that came before, or after, its reader waited), which the
    traced run's step costs do not describe: its Measured is not the traced path's RTT without probes.
    Sleeps closer than SLEEPS_SAME_PATH per call, IPIs closer than IPI_SAME_PATH: the same path.
    Either way: interrupts that the traced run alone took land on its path too (a UDP 0 case with 0.23
    and 0.20 IPIs a call traced, none untraced and the sleeps alike has ~45 % of its traced calls on a
    path 13 us longer, with interrupt-borne wake-ups), so its traces describe another path than the
    untraced run took."""
    sp = case_meta.get("sleeps_per_call") or {}
    u, t = sp.get("untraced"), sp.get("traced")
    if not u or not t:
        return None
    ipi = ("client_ipi", "server_ipi")
    out = {"untraced": f"{u['client']:.2f}/{u['server']:.2f}", "traced": f"{t['client']:.2f}/{t['server']:.2f}",
           "same": same_path(u, t)}
    if all(k in u and k in t for k in ipi):
        out.update(untraced_ipi=f"{u['client_ipi']:.2f}/{u['server_ipi']:.2f}",
                   traced_ipi=f"{t['client_ipi']:.2f}/{t['server_ipi']:.2f}")
    return out


OTHER_PATH_KEYS = {"client_sleeps": "client", "server_sleeps": "server", "client_ipis": "client_ipi",
                   "server_ipis": "server_ipi"}


def other_path_counts(case_meta):
    """What the untraced runs blocked and were interrupted beyond the traced run, per call:
    {"client_sleeps", "server_sleeps", "client_ipis", "server_ipis"} (steps.json rtt[].other_path), or
    None where the capture did not count them. Untraced: the
    median of the rounds in the kept round's speed level where LEVEL_MEDIAN_ROUNDS or more ran there
    (level_p50_ns), else the kept round's; traced: the kept round's, whose traces give the
    step costs. A difference closer than SLEEPS_SAME_PATH or IPI_SAME_PATH counts 0, the same path:
    the traced run's own tracer threads add up to ~0.03 sleeps and ~0.1 interrupts a call, which no
    wake-up on the round trip pays."""
    sp = case_meta.get("sleeps_per_call") or {}
    traced = sp.get("traced")
    if not traced:
        return None
    rep = case_meta.get("repeats") or {}
    rounds = rep.get("untraced_sleeps_per_call") or []
    agreeing = rep.get("agreeing_rounds") or []
    level = [rounds[r] for r in agreeing if r < len(rounds) and rounds[r]]
    untraced = level if len(level) >= LEVEL_MEDIAN_ROUNDS else [sp.get("untraced")] if sp.get("untraced") else []
    out = {}
    for name, key in OTHER_PATH_KEYS.items():
        vals = [u[key] for u in untraced if u.get(key) is not None]
        if not vals or traced.get(key) is None:
            continue
        d = float(np.median(vals)) - traced[key]
        out[name] = round(d, 3) if abs(d) >= _same_path_bound(key) else 0.0
    return out or None


def untraced_path_same(case_meta):
    """path_shape's verdict alone: True, False, or None where the capture did not count."""
    return (path_shape(case_meta) or {}).get("same")


# The modes of a client histogram (histogram_modes): bins merged to MODE_BIN_US; a bin holding
# MODE_OCCUPIED of the calls or more is part of a mode, so a mode ends where the calls thin out below
# that (TCP 4016 in the faster level: modes at 14.4, 16.3 and 25.0 us, with under 0.2 % of the calls
# in each 0.25 us between them); modes holding under MODE_MIN_SHARE of the calls are left out (a
# ragged edge, a few preempted calls).
MODE_BIN_US = 0.25
MODE_OCCUPIED = 0.005
MODE_MIN_SHARE = 0.03


def valid_histogram(hist):
    """Whether hist has the shape rpc-client writes for rtt_hist (a positive bin_ns, a from_ns, counts
    of whole numbers, above): a hand-edited or cut file is read as no histogram, not as wrong modes."""
    try:
        return (hist["bin_ns"] > 0 and hist["from_ns"] >= 0 and int(hist.get("above", 0)) >= 0
                and isinstance(hist["counts"], list) and all(isinstance(n, int) and n >= 0 for n in hist["counts"]))
    except (KeyError, TypeError, ValueError):
        return False


def histogram_modes(hist, p50_ns=None):
    """The modes of a client's RTT histogram (rpc-client --json "rtt_hist": bin_ns, from_ns, counts,
    above): {"modes": [{"from_us", "to_us", "peak_us", "share"}] fastest first, "p50_mode": the index
    of the mode holding p50_ns (None where it lies between them, or without p50_ns)}, or None without
    a histogram. Why: an untraced run can take several paths in turn (in the faster level TCP 4016's
    calls fall in three modes, +2 us and +10.5 us over the first), and its p50, the model's
    Measured, then lies in whichever mode holds the middle call, which a count of sleeps and
    interrupts per call does not say."""
    if not hist or not valid_histogram(hist) or not hist["counts"]:
        return None
    bin_us = hist["bin_ns"] / 1000.0
    merge = max(1, round(MODE_BIN_US / bin_us))
    width = merge * bin_us
    raw = hist["counts"]
    bins = [sum(raw[i:i + merge]) for i in range(0, len(raw), merge)]
    total = sum(raw) + int(hist.get("above", 0))
    if total <= 0:
        return {"modes": [], "p50_mode": None}
    start = hist["from_ns"] / 1000.0
    modes, run = [], None
    for k, n in enumerate(bins + [0]):
        if n >= MODE_OCCUPIED * total and k < len(bins):
            run = [k, k] if run is None else [run[0], k]
            continue
        if run is not None:
            share = sum(bins[run[0]:run[1] + 1]) / total
            if share >= MODE_MIN_SHARE:
                peak = max(range(run[0], run[1] + 1), key=lambda j: bins[j])
                modes.append({"from_us": round(start + run[0] * width, 3),
                              "to_us": round(start + (run[1] + 1) * width, 3),
                              "peak_us": round(start + (peak + 0.5) * width, 3), "share": round(share, 3)})
            run = None
    return {"modes": modes, "p50_mode": None if p50_ns is None else _mode_holding(modes, p50_ns / 1000.0)}


def _mode_holding(modes, us):
    """The index of the mode whose span holds `us`, or None."""
    return next((i for i, m in enumerate(modes) if m["from_us"] <= us < m["to_us"]), None)


def untraced_modes(run_path, case_meta):
    """histogram_modes of a case's kept untraced run (its client-untraced.json), with "source"; None
    where the client wrote no histogram or the file is missing."""
    f = pathlib.Path(run_path) / case_meta.get("dir", f"cases/{case_meta.get('id')}") / "client-untraced.json"
    try:
        res = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    out = histogram_modes(res.get("rtt_hist"), (res.get("rtt_ns") or {}).get("p50"))
    if out is not None:
        out["source"] = f"{f.relative_to(run_path)} rtt_hist"
    return out


def modes_label(modes):
    """"14.4 us 17 %, 16.3 us 39 % (p50), 25.0 us 38 %": an untraced_modes in a table cell; "" for None."""
    if not modes:
        return ""
    where = "" if modes["p50_mode"] is not None else " (p50 between)" if len(modes["modes"]) > 1 else " (p50 outside)"
    return ", ".join(f"{m['peak_us']:.1f} us {m['share'] * 100:.0f} %" + (" (p50)" if i == modes["p50_mode"] else "")
                     for i, m in enumerate(modes["modes"])) + where


def p50_mode_label(modes, calculated_us=None):
    """"p50 in mode 2 of 3", or "p50 between 2 modes", for an untraced_modes with several modes, and with
    calculated_us (the model's RTT) where that lies by another mode than the p50's: "; the model by
    mode 1 (14.7 us, 17 %)", the mode whose span holds it or else whose peak is nearest: the path the
    model describes, which that share of the untraced calls took. None for one mode or none."""
    if not modes or len(modes["modes"]) < 2:
        return None
    ms, n = modes["modes"], len(modes["modes"])
    text = f"p50 in mode {modes['p50_mode'] + 1} of {n}" if modes["p50_mode"] is not None else f"p50 between {n} modes"
    if calculated_us is not None:
        by = _mode_holding(ms, calculated_us)
        if by is None:
            by = min(range(n), key=lambda i: abs(ms[i]["peak_us"] - calculated_us))
        if by != modes["p50_mode"]:
            text += f"; the model by mode {by + 1} ({ms[by]['peak_us']:.1f} us, {ms[by]['share'] * 100:.0f} %)"
    return text


def error_row_paths(run_path, case_meta, calculated_us=None):
    """What a model's error row says of the untraced run of its case: {"untraced_path_same":
    untraced_path_same, "untraced_p50_mode": p50_mode_label of its untraced_modes and the row's
    calculated_us}; one rule for the goals, the report and `rpcscope run`."""
    case_meta = case_meta or {}
    modes = untraced_modes(run_path, case_meta) if case_meta else None
    return {"untraced_path_same": untraced_path_same(case_meta),
            "untraced_p50_mode": p50_mode_label(modes, calculated_us)}


def call_edges_ns(case_meta, traced_rtts_ns):
    """The time per call that the client's clock measures outside the traced span C1 .. C21 (rpc/bench.c
    reads the clock each side of the call; the trace's RTT runs from C1's timestamp to C21's): the
    traced run's client-measured p50 less the p50 of its calls' traced RTTs by the client's own rule
    (rpc/bench.c: the sorted RTTs' element (n - 1) * 50 / 100). The same calls, in the same order of
    size, so the difference holds for a few calls as for many. None unless every call of that run is
    in traced_rtts_ns."""
    traced = case_meta.get("traced") or {}
    n = len(traced_rtts_ns)
    if not n or not traced.get("p50") or traced.get("calls") != n:
        return None
    return float(traced["p50"]) - float(sorted(traced_rtts_ns)[(n - 1) * 50 // 100])


class Case:
    def __init__(self, run, meta):
        self.run = run
        self.meta = meta
        self.id = meta["id"]
        self.transport = meta.get("transport", "udp")
        self.proc = meta.get("proc", run.params.get("proc"))
        self.size = int(meta.get("size", 0))
        self.calls = int(meta.get("calls", run.params.get("calls", 0)))
        self.warmup = int(meta.get("warmup", run.params.get("warmup", 0)))
        self.dir = run.path / meta.get("dir", f"cases/{self.id}")
        self.pids = {k: int(v) for k, v in (meta.get("pids") or {}).items()}
        self.complete = meta.get("complete", True) is not False
        self.lossy = bool(meta.get("lossy", False))

    def __repr__(self):
        return f"Case({self.id})"

    # ------------------------------------------------------------ conditions
    def request_body(self):
        return request_body_bytes(self.proc, self.size)

    def conditions(self, side):
        """The catalog's not_applicable conditions that hold for this case, for the
        steps of one side ("client" or "server")."""
        m = self.run.manifest
        c = set()
        if self.transport == "tcp":
            c.add("tcp")
        if int(m.get("server_executors", self.run.params.get("executors", 0)) or 0) == 0:
            c.add("inline")
        if self.run.virtual_link:
            c.add("virtual_link")
        body = self.request_body()
        if body is not None and window_count(body) == 1:
            c.add("single_window")
        if self.proc in ONEWAY_PROCS:
            c.add("oneway")
        if m.get("params", {}).get("no_nb_select") or m.get("no_nb_select"):
            c.add("no_nb_select")
        if side == "client":
            wait = m.get("wait", self.run.params.get("wait", "select"))
        else:
            wait = (m.get("server_wait") or {}).get(self.transport, "select")
        if wait == "recv":
            c.add("recv_wait")
        elif wait == "busy":
            c.add("busy_poll")
        return c

    # ------------------------------------------------------------ traces
    def _trace_dirs(self, kind):
        """[(host or None, path)] of the case's traces of one kind ("ust" or "kernel")."""
        tracepack.unpack_case(self.dir, kind)          # `rpcscope run` leaves them packed
        d = self.dir / kind
        if d.exists():
            return [(None, d)]
        return [(p.name[len(kind) + 1:], p) for p in sorted(self.dir.glob(f"{kind}-*")) if p.is_dir()]

    def ust(self, **kw):
        return self._read("ust", 0, **kw)

    def kernel(self, **kw):
        return self._read("kernel", 8, **kw)

    def trace_bytes(self):
        """The size of the case's traces on disk (the work of decoding and rebuilding it)."""
        return sum(f.stat().st_size for kind in ("ust", "kernel") for _, d in self._trace_dirs(kind)
                   for f in d.rglob("*") if f.is_file())

    def has_kernel(self):
        return bool(self._trace_dirs("kernel"))

    def _read(self, kind, src0, backend="auto"):
        dirs = self._trace_dirs(kind)
        cache = self.run.cache_dir
        if not dirs:
            return traceread.read_trace(self.dir / kind, src=src0)      # empty, with a "missing" problem
        for _, p in dirs:
            self.run.wait_for_trace(p)
        evs = [traceread.read_trace(p, cache_dir=cache, src=src0 + i, backend=backend)
               for i, (_, p) in enumerate(dirs)]
        tl = self.timeline()
        evs = [ev if tl.map_for(h).identity else
               traceread.Events(dict(ev.cols, ts=tl.map_for(h).forward(ev.ts), cpu=tl.map_for(h).cpus(ev.cpu)),
                                ev.names, ev.sources, ev.problems, ev.threads)
               for (h, _), ev in zip(dirs, evs)]
        return evs[0] if len(evs) == 1 else traceread.merge(evs)

    def _raw_stored(self, kind):
        """[(host or None, trace directory name, traceread.StoredTrace)] of the case's traces of one kind,
        on each host's own clock (decoded on first use)."""
        memo = self.__dict__.setdefault("_raw", {})
        if kind not in memo:
            dirs = self._trace_dirs(kind)
            src0 = 0 if kind == "ust" else 8
            if not dirs:
                memo[kind] = [(None, kind, traceread.StoredTrace(self.dir / kind, src=src0))]
            else:
                for _, p in dirs:
                    self.run.wait_for_trace(p)
                memo[kind] = [(h, p.name, traceread.StoredTrace(p, cache_dir=self.run.cache_dir, src=src0 + i))
                              for i, (h, p) in enumerate(dirs)]
        return memo[kind]

    def timeline(self):
        """The case's timeline (timeline.py): each host's clock map onto the client's, and the clock fit
        with its bound and flag."""
        if "_timeline" not in self.__dict__:
            kinds = ("ust", "kernel") if self.has_kernel() else ("ust",)
            self._timeline = timeline.build(self, {k: self._raw_stored(k) for k in kinds}, self.roles,
                                            self.run.shared_kernel)
        return self._timeline

    def stored(self, kind):
        """[traceread.StoredTrace] of the case's traces of one kind ("ust" or "kernel"), one per host
        (decoded on first use; read a time range at a time), on the client's clock (timeline())."""
        memo = self.__dict__.setdefault("_stored", {})
        if kind not in memo:
            tl = self.timeline()
            memo[kind] = [st.on_clock(tl.map_for(h)) for h, _, st in self._raw_stored(kind)]
        return memo[kind]

    def span(self, kind, lo=None, hi=None, columns=None):
        """The case's events of one kind with lo <= ts <= hi (None: open), every host merged; columns:
        only those."""
        evs = [t.span(lo, hi, columns) for t in self.stored(kind)]
        return evs[0] if len(evs) == 1 else traceread.merge(evs)

    def roles(self, ust):
        """{tid: "client"|"server"} of the case's own processes in a UST trace: by the
        manifest's pids (vpid context), else by procname."""
        out = {}
        by_pid = {v: k for k, v in self.pids.items()}
        tids, first = np.unique(np.asarray(ust.tid), return_index=True)
        pids = np.asarray(ust.pid)[first]
        for t, p in zip(tids.tolist(), pids.tolist()):
            role = by_pid.get(p)
            if role is None and not by_pid:
                name = (ust.threads.get(t) or {}).get("procname", "")
                role = "client" if name.startswith("rpc-client") else "server" if name.startswith("rpc-server") \
                    else None
            if role:
                out[t] = role
        return out

    def host_of(self, role):
        for name, h in self.run.hosts.items():
            if h.get("role") == role:
                return name
        return None

    def calibration(self, role):
        """The cost of one probe for this role's host: the in-situ calibration's effective costs on the
        round-trip path when the run has one (analysis/probe.py), else the manifest's loopback ones."""
        probe = self.run.probe
        pr = (probe.get("cases") or {}).get(self.id) or (probe.get("transports") or {}).get(self.transport)
        if pr and pr.get("ust_event_ns") is not None and pr.get("kernel_event_ns") is not None:
            return {"ust_event_ns": max(0.0, pr["ust_event_ns"]),
                    "kernel_event_ns": dict(pr["kernel_event_ns"]), "source": pr.get("source", "in-situ")}
        return (self.run.manifest.get("calibration") or {}).get(self.host_of(role)) or {}


class Run:
    """A run directory as the analysis reads it. calibrate(run) -> {"transports", "cases"}: the in-situ
    probe calibration (analysis/probe.py in_situ), computed the first time Run.probe is read; without
    it, Run.probe is {} and every case is corrected with the manifest's loopback costs."""

    def __init__(self, path, calibrate=None):
        self.dir = RunDir(path)
        self.path = self.dir.path
        try:
            self.manifest = self.dir.read_manifest()       # checked: its shape, its format
        except ManifestError as e:
            raise RunError(str(e)) from None
        self.params = self.manifest.get("params", {})
        self.testbed = self.manifest.get("testbed", {})
        # Hosts with their own kernels number their CPUs alike: the analysis renumbers each host's
        # (timeline.CPU_STRIDE times its rank, the client first), here and in the traces it reads.
        hosts = self.manifest.get("hosts", {})
        order = sorted(hosts, key=lambda n: (hosts[n].get("role") != "client", n))
        self.cpu_base = {n: i * timeline.CPU_STRIDE for i, n in enumerate(order)} \
            if len(hosts) > 1 and not self.testbed.get("shared_kernel", True) else {}
        self.hosts = {n: dict(h, cpus=[int(c) + self.cpu_base[n] for c in h.get("cpus") or []])
                      if self.cpu_base.get(n) else h for n, h in hosts.items()}
        self.cases = [Case(self, c) for c in self.manifest.get("cases", [])]
        self.out_dir = self.dir.analysis
        self.cache_dir = self.dir.cache
        self._probe = None
        self.calibrate = calibrate
        self._prefetch = None            # (thread pool, {trace dir: future}) while prefetch() decodes

    @property
    def probe(self):
        """The in-situ probe calibration per transport and case (calibrate's), {} when there is none."""
        if self._probe is None:
            self._probe = {}                  # while it is computed, the calibration cases use none
            self._probe = (self.calibrate(self) if self.calibrate else {}) or {}
        return self._probe

    def in_situ_calibrations(self):
        """The manifest's in-situ probe calibration runs per transport (rpcscope/rundir.py)."""
        return in_situ_calibrations(self.manifest)

    def trace_dirs(self):
        """Every trace directory the analysis reads: [(label, path)]."""
        out = []
        for case in self.cases:
            if not case.complete:
                continue
            for kind in ("ust", "kernel"):
                for host, p in case._trace_dirs(kind):
                    out.append((f"{case.id} {kind}{'-' + host if host else ''}", p))
        for transport, cal in self.in_situ_calibrations().items():
            for size, c in cal["sizes"].items():
                for kind in ("ust", "kernel"):
                    p = self.path / c.get("dir", "") / kind
                    if p.is_dir():
                        out.append((f"in-situ {transport} {size} {kind}", p))
        return out

    def prefetch(self, workers=None):
        """Start decoding every trace of the run into the cache in the background, several at once
        (the native extractor is a process of its own per trace), in case order: the analysis of
        the first cases then overlaps the decoding of the later ones (Case reads wait for their own
        traces). What the cache already holds is only mapped. finish_prefetch() waits for the rest."""
        dirs = list(dict.fromkeys(p for _, p in self.trace_dirs()))
        workers = workers or min(len(dirs), os.cpu_count() or 1)
        if not dirs or self._prefetch is not None:
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        pool = concurrent.futures.ThreadPoolExecutor(max(workers, 1), thread_name_prefix="rpcscope-decode")
        self._prefetch = (pool, {p: pool.submit(traceread.read_trace, p, cache_dir=self.cache_dir) for p in dirs})

    def wait_for_trace(self, path):
        """Wait until a prefetching thread is done with this trace (its errors are left to the
        reader, which meets them again and reports them)."""
        f = self._prefetch[1].get(path) if self._prefetch else None
        if f is not None:
            concurrent.futures.wait([f])

    def finish_prefetch(self, cancel=False):
        """Wait for the decoding started by prefetch(); cancel: drop what has not started yet (an
        analysis that failed or was interrupted)."""
        if self._prefetch is not None:
            self._prefetch[0].shutdown(wait=True, cancel_futures=cancel)
            self._prefetch = None

    @property
    def shared_kernel(self):
        return bool(self.testbed.get("shared_kernel"))

    @property
    def virtual_link(self):
        """veth or loopback: no transmit-complete interrupt. The local testbed is veth
        pairs and a bridge; a link may say its kind explicitly."""
        link = self.testbed.get("link") or {}
        if link.get("kind"):
            return link["kind"] in ("veth", "loopback", "lo")
        return self.testbed.get("kind", "local") == "local"


def load_run(path, calibrate=None):
    return Run(path, calibrate)
