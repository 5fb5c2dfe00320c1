"""A transport's rounds: every size's runs of every kind, in sweeps (round r of every size before
round r + 1 of any) with extra sweeps until enough rounds agree, or with --turns every run of a round
at once, taking turns of a few calls. The figures that choose the kept round are collectors/rounds.py's.
"""
import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import time

from rpcscope.output import UserError
from rpcscope.rundir import TARGET_CASE_JSON, sweeps_settled

from . import ftrace, interleave, target
from .options import KERNEL_ONLY_KINDS, MIN_TURNS_ROUNDS, TRACED_TURN_EVERY, TURN_CALLS, fragments
from .processes import ipi_counts, ipi_delta, read_text
from .rounds import (
    EXTRA_SWEEP_SECONDS,
    FINISH_SECONDS_PER_CASE,
    LEVEL_GAP,
    SWEEP_AGREE_PCT,
    _p50s,
    choose_sweep,
    level_rounds,
    round_speeds,
    settled_rounds,
    sleeps_per_call,
    straddle_pct,
    sweeps_end,
    turn_buffer_kb,
    turns_kept_round,
    turns_spread_pct,
)


@dataclasses.dataclass
class TurnRun:
    """One run of a round whose runs take turns (Sweeps.turns_round): what it is, what it started, what
    it measured."""
    case: dict                        # the manifest's case record
    kind: str                         # "untraced", "clock", "ust", "traced", or one of KERNEL_ONLY_KINDS
    dir: pathlib.Path                 # cases/ID/repeat-R
    tag: str                          # KIND-R: its files' names
    srv: object = None                # rpc-server's Popen
    cl: object = None                 # rpc-client's Popen, held before exec until released
    taker: object = None              # its interleave.TurnTaker
    timeout: float = 0.0              # the client's time bound, in s
    out: pathlib.Path | None = None   # the client's JSON output file
    ust: pathlib.Path | None = None   # its UST trace's directory
    session: str | None = None        # its UST session while it records
    rec: object = None                # its paused ftrace.FtraceRecorder (traced kind)
    ko: object = None                 # its paused target.KernelOnlyRecording (KERNEL_ONLY_KINDS)
    got: dict = dataclasses.field(default_factory=dict)    # losses and kernel data, as trace_hook's
    ipis: dict = dataclasses.field(default_factory=dict)   # {role: IPIs over its turns}
    res: dict | None = None           # rpc-client's JSON


class Sweeps:
    """A transport's rounds, for the Capture (with RpcRuns and Tracing): it holds p, out, cpus, kernel,
    procs, progress, started, last_ipis, and step(), advance(), cpu_speed_check()."""

    def sweeps(self, transport, cases, kinds, n):
        """n rounds of runs of the given kinds ("untraced", "clock": the clock build, "ust": user events
        only, "traced": user and kernel events) of every case of a transport into cases/ID/repeat-R/, in
        sweeps: round r of every case (in size order) before round r + 1 of any. Returns ({case id: {kind: [run]}}, the
        order the runs ran in per case, {case id: (its kept round, the rounds that agree with it)}, the
        sweeps' record), a run being {"res", "pids", "got", "dir", "ust"}.

        Why rounds: on this VM one run's p50 moves by up to 25 % from the next identical one (its calls
        uniformly slower or faster), so a single run cannot stand for the configuration. Why each round
        runs every kind once (untraced and traced; user-only too with --user-only-runs): this VM's speed
        switches between levels ~20-30 % apart that hold for seconds to minutes (a TCP case's untraced
        rounds 25.4, 25.2, 25.3, 18.0, 18.1 us); a level touches the round trip, not a CPU-bound loop (a
        fixed Python loop takes 0.19 s in either level while the null call goes from 22.0 to 26.5 us).
        Why sweeps: the model fits each step's unit cost over the sizes of a transport, so every size
        must be measured in the same level. Were each case to run its rounds before the next case, a
        switch between cases would put sizes in different levels that no unit costs fit (one size off by
        25 % while its neighbours lie within 1.4 %). A sweep of a
        transport's sizes takes ~10-15 s, so most sweeps lie in one level; the kept round is the one
        most other rounds agree with (choose_sweep), and up to MAX_EXTRA_ROUNDS more sweeps are made
        while fewer than SWEEP_SETTLE_ROUNDS agree (if none settles, each size keeps a whole round in
        one level of the host's speed: level_rounds). A perf's tracepoints cost the calls even while its
        events are disabled (the null call's untraced p50 is 8 % higher with a
        disabled perf attached, measured on this VM), so the kernel collector is ended before every
        run that is not traced (kernel_release) and started again for the next traced one: about
        1.5 s a round with perf, 0.2 s with ftrace."""
        calls, warmup = self.p["calls"], self.p["warmup"]
        runs = {c["id"]: {k: [] for k in kinds} for c in cases}
        order = {c["id"]: [] for c in cases}

        def one(case, r, kind, rounds):
            cdir = self.out / case["dir"]
            rdir = cdir / f"repeat-{r}"
            rdir.mkdir(parents=True, exist_ok=True)
            if kind != "traced":
                self.kernel_release()
            self.step(f"{case['id']}: {kind}, round {r + 1}/{rounds}")
            got, hook, ust, clock_out = {}, None, rdir / f"ust-{kind}", None
            if kind == "clock":      # the rounds' clock runs keep a ring of marks: the anchor's (clock_env)
                clock_out = {**{role: rdir / f"clock-{role}.txt" for role in ("client", "server")}, "ring": True}
            elif kind != "untraced":
                hook = self.trace_hook(ust, calls + warmup, fragments(case["size"], transport), got,
                                       kernel_dir=rdir if kind == "traced" else None)
            traced = kind in ("ust", "traced") or (kind == "untraced" and self.p["untraced"] == "stopped")
            res, pids = self.run_pair(transport, case["size"], calls, warmup, traced, rdir, f"{kind}-{r}", hook,
                                      clock_out=clock_out)
            if kind == "ust":
                shutil.rmtree(ust, ignore_errors=True)   # only its p50 is used: no disk held for it
            sleeps = sleeps_per_call(res, rdir / f"server-{kind}-{r}-stats.json", self.last_ipis, calls + warmup)
            runs[case["id"]][kind].append({"res": res, "pids": pids, "got": got, "dir": rdir, "ust": ust,
                                           "sleeps": sleeps})
            order[case["id"]].append(f"{kind}-{r}")
            self.advance()

        def sweep(r, rounds):
            t0 = time.monotonic()
            if self.p.get("turns"):
                self.turns_round(transport, cases, kinds, r, rounds, runs, order)
            else:
                for case in cases:
                    for kind in kinds:
                        one(case, r, kind, rounds)
            seconds.append(round(time.monotonic() - t0, 1))
            self.kernel_release()         # the check runs with no tracer attached, as untraced runs do
            self.cpu_speed_check(f"{transport} sweep {r + 1}")

        seconds = []
        if self.p.get("turns"):
            ended = "turns"
            for r in range(n):
                sweep(r, n)
                left = self.seconds_left(transport, MIN_TURNS_ROUNDS, seconds)
                if MIN_TURNS_ROUNDS <= r + 1 < n and left is not None and left < statistics.median(seconds):
                    ended = "capture deadline"
                    if self.progress is not None:
                        self.progress.total -= (n - r - 1) * len(kinds) * len(cases)
                    break
            return (runs, order, *self.turns_record(transport, cases, runs, len(seconds), seconds, ended))
        for r in range(n):
            sweep(r, n)
        p50s = _p50s(runs)
        kept, agreeing, dist = choose_sweep(p50s)
        r = n
        budget = self.p.get("extra_sweep_seconds", EXTRA_SWEEP_SECONDS)
        while (ended := sweeps_end(agreeing, r, n, seconds, budget, self.seconds_left(transport, n, seconds))) is None:
            if self.progress is not None:
                self.progress.total += len(kinds) * len(cases)
            sweep(r, r + 1)
            r += 1
            p50s = _p50s(runs)
            kept, agreeing, dist = choose_sweep(p50s)
        settled = sweeps_settled(agreeing, r)     # every sweep (one at least) ended its kernel collector
        if settled:
            level, by_case = None, {c["id"]: settled_rounds(p50s, c["id"], kept, agreeing) for c in cases}
        else:
            level, by_case = level_rounds(p50s, [c["id"] for c in cases])
        record = {"rounds": n, "extra_rounds": r - n, "kept_round": kept, "agreeing_rounds": agreeing,
                  "settled": settled, "agree_pct": SWEEP_AGREE_PCT,
                  "kept": "the sweep most rounds agree with" if settled else
                  f"each size's most central whole round in the host's {('faster', 'slower')[level]} level",
                  "level": None if settled else ("faster", "slower")[level], "level_gap_pct": 100 * LEVEL_GAP,
                  "kept_by_case": {cid: k for cid, (k, _) in by_case.items()},
                  "kept_straddle_pct": {cid: round(straddle_pct({x: v for x, v in p50s.items() if x[0] == cid})[k], 2)
                                        for cid, (k, _) in by_case.items()},
                  "distance_pct": [[round(x, 2) for x in row] for row in dist], "seconds": seconds,
                  "ended": ended, "extra_sweep_seconds": budget,
                  "deadline_seconds": self.p.get("deadline_seconds"),
                  "cases": [c["id"] for c in cases]}
        return runs, order, by_case, record

    def turns_round(self, transport, cases, kinds, r, rounds, runs, order):
        """Round r of every case and kind of a transport at once (--turns): a server and a held client
        each, the traced ones' UST sessions and tracefs instances (one per case, paused, its events
        off), then turns of --turn-calls each (a traced run's: TRACED_TURN_EVERY times as long, in one
        pass in as many), round robin (collectors/interleave.py take_cooperative_turns), with the
        case's instance recording only while its traced client has the turn. Appends each run to
        runs[case id][kind] as one() does, with its turns.

        Why: this VM's speed moves by ~10 % within a tenth of a second (analysis/MODEL.md), so runs one
        after the other differ by as much; runs that take turns every few ms see the same moments of
        the host. The traced run's step costs, the untraced run's Measured and every size the model is
        fitted over then come from the same host (`rpcscope bench interleave`: the ln ratio of two
        identical runs spread 0.3-0.6 % taking turns, 4-8 % one after the other). The IPIs of a run are
        counted over its turns (one read of /proc/interrupts, ~80 us, at each turn's end)."""
        calls, warmup = self.p["calls"], self.p["warmup"]
        total = calls + warmup
        members = [TurnRun(c, k, self.out / c["dir"] / f"repeat-{r}", f"{k}-{r}") for c in cases for k in kinds]
        if self.p.get("kernel_only_runs"):
            members += [TurnRun(c, k, self.kernel_only_dir(c, r, rounds, k), f"{k}-{r}")
                        for c in cases for k in self.kernel_only_kinds()]
        self.step(f"{transport}: round {r + 1}/{rounds}, {len(members)} runs taking turns")
        evs = self.kernel_event_set() if self.kernel == "ftrace" and "traced" in kinds else []
        try:
            for i, m in enumerate(members):
                self._turn_start(m, transport, total, len(members), evs, i)
            for m in members:
                try:
                    m.cl.stdin.write(b"go\n")
                    m.cl.stdin.close()
                except BrokenPipeError:
                    log = read_text(m.dir / f"client-{m.tag}.log", "")[-400:]
                    raise UserError(f"{m.case['id']} {m.kind}: rpc-client exited before its first turn: "
                                    f"{log}") from None

            def on_start(taker):
                m = by_taker[taker]
                for rec in (m.rec, m.ko):
                    if rec:
                        rec.resume()

            def on_end(taker):
                m = by_taker[taker]
                for rec in (m.rec, m.ko):
                    if rec:
                        rec.pause()
                counts = ipi_counts()          # this turn's end, and the next one's start
                for role, n_ipi in (ipi_delta(last[0], counts, self.cpus) or {}).items():
                    m.ipis[role] = m.ipis.get(role, 0) + n_ipi
                last[0] = counts

            by_taker = {m.taker: m for m in members}
            last = [ipi_counts()]
            try:
                interleave.take_cooperative_turns([m.taker for m in members], max(m.timeout for m in members),
                                                  on_start=on_start, on_end=on_end)
            except interleave.TurnsError as e:
                raise UserError(f"{transport} round {r + 1}: {e}; the clients' logs are in "
                                f"{self.out}/cases/*/repeat-{r}/") from None
            for m in members:
                what = f"{transport} {self.p['proc']} {m.case['size']} ({m.tag}, taking turns)"
                try:
                    m.cl.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise UserError(f"{what}: rpc-client did not exit after its last turn") from None
                m.res = self.client_result(m.cl, m.out.read_bytes(), what)
                m.out.unlink()
                if m.session:
                    session, m.session = m.session, None
                    m.got["ust"] = self.ust_stop(session)
                if m.rec:
                    m.got["kernel"] = {"ftrace": m.rec.dump(m.dir / "kernel.ftrace")}
                    rec, m.rec = m.rec, None
                    rec.stop()
                if m.ko:
                    m.got["lost"] = m.ko.finish(m.dir, m.cl.pid, [m.srv.pid])
                    rec, m.ko = m.ko, None
                    rec.stop()
        finally:
            for m in members:
                if m.cl:
                    self.procs.stop(m.cl)
                if m.srv:
                    self.procs.stop(m.srv)       # its --stats-json is written as it exits
                if m.taker:
                    m.taker.close()
                if m.rec:
                    m.rec.stop()
                if m.ko:
                    m.ko.stop()
                if m.session:
                    with contextlib.suppress(Exception):
                        self.ust_stop(m.session)
        for m in members:
            cid, kind, res = m.case["id"], m.kind, m.res
            if kind in KERNEL_ONLY_KINDS:
                # The probe calibration's neighbour: the same build without kernel events, in this round.
                like = "ust" if kind == "kernelonly-traced" else "untraced"
                plain = next((x.res for x in members if x.case is m.case and x.kind == like), None)
                if kind == "kernelonly-traced":
                    shutil.rmtree(m.ust, ignore_errors=True)    # its user events are only its probe
                self.kernel_only_case(m, plain, r, rounds)
                continue
            if kind == "ust":
                shutil.rmtree(m.ust, ignore_errors=True)   # only its p50 is used: no disk held for it
            turns = res.get("turns") or {}
            sleeps = sleeps_per_call(res, m.dir / f"server-{m.tag}-stats.json", m.ipis or None, total,
                                     turn_waits=(turns.get("waits_measured", 0), turns.get("count", 0)))
            runs[cid][kind].append({"res": res, "pids": {"server": m.srv.pid, "client": m.cl.pid},
                                    "got": m.got, "dir": m.dir, "ust": m.ust, "sleeps": sleeps,
                                    "turns": {"count": m.taker.turns, "seconds": round(m.taker.seconds, 3)}})
            order[cid].append(m.tag)
            self.advance()

    def _turn_start(self, m, transport, total, n_members, evs, index):
        """One run of a round taking turns: its server, its client held before exec with its TurnTaker,
        and for a traced kind its UST session and (evs: the ftrace event set) its paused tracefs instance,
        whose events are enabled only in the run's turns. index: the run's place in the round; a traced
        run's fewer turns fall in the passes it names (interleave.TurnTaker phase)."""
        case, kind, rdir, tag = m.case, m.kind, m.dir, m.tag
        calls, warmup = self.p["calls"], self.p["warmup"]
        rdir.mkdir(parents=True, exist_ok=True)
        clock_out = ({**{role: rdir / f"clock-{role}.txt" for role in ("client", "server")}, "ring": True}
                     if kind == "clock" else {})
        traced = (kind in ("ust", "traced", "kernelonly-traced")
                  or (kind == "untraced" and self.p["untraced"] == "stopped"))
        prefix = []
        if kind in KERNEL_ONLY_KINDS:
            m.ko = target.KernelOnlyRecording([self.hosts[role]["ifname"] for role in ("client", "server")],
                                              tag=f"rpcscope-ko-{os.getpid()}-{index}",
                                              copies=2 if kind == "kernelonly-doubled" else 1,
                                              hops=[self.hosts[role]["peer_ifname"] for role in ("client", "server")])
            m.ko.start()
            prefix = m.ko.holder()
        port = self.next_port()
        m.srv = self.start_server(self.ns("server"), self.addr("server"), port, transport, self.cpus["server"],
                                  traced, rdir, tag, self.server_wait(transport),
                                  clock_out=clock_out.get("server"), clock_ring=True, prefix=prefix)
        # A run whose instances switch their events per turn takes fewer, longer turns (TRACED_TURN_EVERY).
        every = TRACED_TURN_EVERY if (kind == "traced" and evs) or kind in KERNEL_ONLY_KINDS else 1
        m.taker = interleave.TurnTaker(f"{case['id']} {kind}", every=every, phase=index)
        argv, m.timeout = self.client_argv(self.ns("client"), self.addr("server"), port, transport,
                                           case["size"], calls, warmup, self.cpus["client"], traced,
                                           clock_out=clock_out.get("client"), clock_ring=True,
                                           turns=(m.taker, n_members))
        m.out = rdir / f"client-{tag}.json"
        with open(m.out, "wb") as out:      # a file, not a pipe: an exiting client never blocks
            m.cl = self.procs.spawn(prefix + argv, rdir / f"client-{tag}.log", stdin=subprocess.PIPE,
                                    stdout=out, pass_fds=m.taker.child_fds())
        m.taker.after_spawn()
        if m.ko:
            m.ko.watch([m.srv.pid])
            m.ko.watch([m.cl.pid], client=True)
        m.ust = rdir / f"ust-{kind}"
        if kind in ("ust", "traced", "kernelonly-traced"):
            shutil.rmtree(m.ust, ignore_errors=True)
            m.session = self.ust_start(m.ust, total, fragments(case["size"], transport), [m.srv.pid, m.cl.pid])
        if kind == "traced" and evs:
            m.rec = ftrace.FtraceRecorder(evs, self.devices(),
                                          buffer_kb=turn_buffer_kb(total, fragments(case["size"], transport)),
                                          events_off_while_paused=True)
            m.rec.start()
            m.got["kernel_events"] = evs

    def kernel_only_dir(self, case, r, rounds, kind):
        """Where round r's kernel-only run of a case goes (capture --kernel-only-runs): a case of the
        capture's kernel-only target run of that kind's build, named as `rpcscope run --target reference`
        names its rounds."""
        cid = target.case_id(case["transport"], self.p["proc"], case["size"], r + 1, rounds)
        return self.kernel_only_run_dir(kind) / "cases" / cid

    def kernel_only_kinds(self):
        """The kernel-only runs of a round: the untraced build's (--kernel-only-runs), the traced build's
        (--kernel-only-traced-runs), the untraced build's with every kernel event recorded twice
        (--kernel-only-doubled-runs)."""
        flags = (True, self.p.get("kernel_only_traced_runs"), self.p.get("kernel_only_doubled_runs"))
        return tuple(k for k, on in zip(KERNEL_ONLY_KINDS, flags) if on)

    def kernel_only_run_dir(self, kind):
        """The target run of a kind of kernel-only runs: RUN/KIND/ (RUN/kernelonly/: the untraced build;
        RUN/kernelonly-traced/: the traced build; RUN/kernelonly-doubled/: the untraced build, its kernel
        events recorded twice)."""
        return self.rundir.path / kind

    def kernel_only_case(self, m, plain, r, rounds):
        """Round r's kernel-only run m of a case, its traces already in m.dir: the client's report, the
        case's record (plain: the same round's run of the same build without kernel events, its p50 the
        probe calibration's neighbour: the untraced run, or for the traced build the user-only run
        (--user-only-runs), else none), appended to self.kernel_only_cases[m.kind]."""
        res, case = m.res, m.case
        tc = target.TargetCase(target="reference", transport=case["transport"], proc=self.p["proc"],
                               size=case["size"], calls=self.p["calls"], warmup=self.p["warmup"], dir=str(m.dir),
                               client_pid=m.cl.pid, server_pids=[m.srv.pid],
                               program_p50_us=res["rtt_ns"]["p50"] / 1e3, program_calls=int(res["calls"]),
                               program_ok=True, program_error="",
                               untraced_p50s_us=[plain["rtt_ns"]["p50"] / 1e3] if plain else [],
                               round=r + 1, rounds=rounds)
        (m.dir / "program.json").write_text(json.dumps(res, indent=1))
        (m.dir / TARGET_CASE_JSON).write_text(json.dumps(dataclasses.asdict(tc), indent=1))
        self.kernel_only_cases.setdefault(m.kind, []).append(tc)
        if m.got.get("lost"):
            self.log(f"  WARNING: the kernel-only run's trace lost {m.got['lost']} events ({m.dir}); calls "
                     f"around the gaps may not match")

    def turns_record(self, transport, cases, runs, n, seconds, ended="turns"):
        """({case id: (the kept round, every round)}, the sweeps' record) of a capture whose runs took
        turns (--turns), n rounds made (`ended`: "turns", or "capture deadline" where the deadline cut the
        rounds asked for, MIN_TURNS_ROUNDS): the kept round (turns_kept_round: its sizes stand to each
        other, in every kind, as in most rounds) gives every case its traces; every round is in its
        "level", each round's p50s divided by the case's
        factor in the round (case_factors; analysis/run.py level_rounds_p50s). No extra sweeps: a round's kinds and
        sizes share the host's moments, so the rounds need not agree with one another."""
        p50s = _p50s(runs, clock=True)     # the kinds analysis/run.py case_round_factors takes
        kept = turns_kept_round(p50s)
        every = list(range(n))
        by_case = {c["id"]: (kept, every) for c in cases}
        speed = round_speeds(p50s)
        turns = [x["turns"]["count"] for v in runs.values() for k in v.values() for x in k]
        record = {"rounds": n, "extra_rounds": 0, "kept_round": kept, "agreeing_rounds": every,
                  "settled": True, "agree_pct": SWEEP_AGREE_PCT,
                  "kept": "one round for every size: the one whose sizes stand to each other, in every kind, as in "
                          "most rounds (the sizes and kinds of a round took turns)",
                  "level": None, "kept_by_case": {cid: kept for cid in by_case},
                  "kept_straddle_pct": {}, "distance_pct": [], "seconds": seconds, "ended": ended,
                  "rounds_asked": self.p.get("repeats", 1),
                  "extra_sweep_seconds": 0, "deadline_seconds": self.p.get("deadline_seconds"),
                  "turns": {"turn_calls": self.p.get("turn_calls", TURN_CALLS), "traced_turn_every": TRACED_TURN_EVERY,
                            "runs_per_round": len(turns) // max(1, n),
                            "turns_per_run_median": statistics.median(turns) if turns else None,
                            "probe_effect_spread_pct": turns_spread_pct(p50s), "round_speed": speed},
                  "cases": [c["id"] for c in cases]}
        return by_case, record

    def seconds_left(self, transport, repeats, seconds):
        """Of the capture's --deadline-seconds (None: no deadline), the seconds left for more sweeps of
        `transport` (`seconds`: its sweeps so far) once what must still follow them is set aside: this
        transport's cases' finish, and every later transport's `repeats` sweeps (each estimated as this
        one's median sweep) and finish (FINISH_SECONDS_PER_CASE a case)."""
        deadline = self.p.get("deadline_seconds")
        if deadline is None:
            return None
        transports = self.p["transports"]
        later = len(transports) - transports.index(transport) - 1
        cases = len(self.p["sizes"])
        reserve = (1 + later) * cases * FINISH_SECONDS_PER_CASE + later * repeats * statistics.median(seconds)
        return deadline - (time.monotonic() - self.started) - reserve

