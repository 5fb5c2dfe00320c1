"""The rounds of a capture in figures: which round of a transport's sweeps is kept and which agree with
it (choose_sweep, settled_rounds, level_rounds), the host's speed levels, the rounds' factors when the
runs take turns (turns_kept_round, round_speeds; case_factors lives in rpcscope/rundir.py, which the
analysis reads too), and what one run's client and server report (sleeps_per_call, run_pace_ns).
"""
import bisect
import json
import math
import pathlib
import statistics

from rpcscope.rundir import case_factors, sweeps_settled

from . import ftrace

# Two rounds agree when their runs' p50s differ by at most this much (root mean square of the % differences
# over every case and kind). One run's p50 is usually within 1-2 % of the next identical one's; a switch
# of the host's speed level moves every run 20-30 %, a burst in one run of a 24-run sweep moves it ~5 %.
SWEEP_AGREE_PCT = 3.0
# The sweeps are settled when SWEEP_SETTLE_ROUNDS rounds (rpcscope/rundir.py; or every round, with
# fewer) agree with the kept one, itself included; else up to MAX_EXTRA_ROUNDS more sweeps are made.
MAX_EXTRA_ROUNDS = 6
# ... and no more of one transport's extra sweeps than fit in this many seconds (each estimated as the
# median sweep so far): where the rounds never settle, six extra sweeps of both transports take a
# `make run` close to the 10 minutes it must finish in (UDP's sweeps 14-20 s, TCP's 9-11 s), and a
# slower host passes it; 60 s is four UDP sweeps, five TCP, and a capture that needs more rarely
# settles in them.
EXTRA_SWEEP_SECONDS = 60.0
# What one case's finish (finish_case: its kept traces moved, converted and counted, its clock-marks run)
# is taken to cost when a --deadline-seconds sets aside time for the finishes still to come
# (Capture.seconds_left): UDP's eight take 28 s and TCP's 14 s on a slow host; the larger figure, so
# that the estimate errs towards ending the extra sweeps early.
FINISH_SECONDS_PER_CASE = 3.5


def sweeps_end(agreeing, rounds, repeats, seconds, budget, seconds_left=None):
    """Why sweeps() makes no more extra sweeps after `rounds` (repeats of them planned, `seconds` each
    took, `agreeing` the rounds that agree with the kept one): "settled", "single round" (nothing to
    agree), "most extra rounds" (MAX_EXTRA_ROUNDS), "extra-sweep seconds" (another would pass `budget`
    seconds of extra sweeps), "capture deadline" (another would not fit in the `seconds_left` the
    capture's --deadline-seconds leaves, Capture.seconds_left; None: no deadline), or None to make another."""
    if repeats <= 1:
        return "single round"
    if sweeps_settled(agreeing, rounds):
        return "settled"
    if rounds >= repeats + MAX_EXTRA_ROUNDS:
        return "most extra rounds"
    if sum(seconds[repeats:]) + statistics.median(seconds) > budget:
        return "extra-sweep seconds"
    if seconds_left is not None and statistics.median(seconds) > seconds_left:
        return "capture deadline"
    return None


def _p50s(runs, clock=False):
    """{(case id, kind): [p50 ns of each round]} of sweeps()' runs. The clock build's runs are left out
    unless `clock`: which round of sweeps is kept, and in which level, is chosen as it was before they
    ran in every round. Runs that took turns keep them (turns_record), as the analysis's factors do."""
    return {(cid, k): [r["res"]["rtt_ns"]["p50"] for r in rs] for cid, kinds in runs.items()
            for k, rs in kinds.items() if clock or k != "clock"}


def sweep_distances(p50s):
    """Matrix of the root mean square % difference between two rounds' runs (100 ln of the ratio of
    their p50s, over every case and kind). p50s: {(case, kind): [p50 per round]}, every list as long."""
    rounds = min(len(v) for v in p50s.values())
    logs = [[math.log(v[r]) for v in p50s.values()] for r in range(rounds)]
    return [[100 * math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)) for b in logs] for a in logs]


def choose_sweep(p50s):
    """(the kept round, the rounds that agree with it, the distance matrix). Kept: the round with the
    most others within SWEEP_AGREE_PCT of it (the host's prevailing speed level, every size in it, no
    burst), the one closest to those (the smallest mean distance), the earliest of equals. A round
    whose sizes straddle a switch of level agrees with none; per-case medians would not see that (with
    the level changing inside a sweep, half the cases' medians lie in each level, and the straddling
    round is closest to them all)."""
    dist = sweep_distances(p50s)
    rounds = range(len(dist))
    agree = [[q for q in rounds if dist[r][q] <= SWEEP_AGREE_PCT] for r in rounds]
    kept = min(rounds, key=lambda r: (-len(agree[r]), round(sum(dist[r][q] for q in agree[r]) / len(agree[r]), 6), r))
    return kept, agree[kept], dist


KIND_ORDER = ("untraced", "ust", "traced")


def straddle_pct(p50s, among=None):
    """Per round of one case, how far the differences between its consecutive kinds (traced minus
    untraced; with user-only runs, user-only minus untraced and traced minus user-only: the probe
    effect, CPU work that a level of the host's speed barely moves) stray from their medians over the
    rounds, the largest, as % of the median untraced p50. A round whose kinds ran in different levels
    strays by the jump between levels (an untraced run in the faster level, user-only and traced in the
    slower one: a user share of 8.8 us against a median 5.0, 14 % of the RTT).
    p50s: {(case, kind): [p50 per round]} of one case; among: the rounds whose medians count (default
    every round)."""
    rounds = min(len(v) for v in p50s.values())
    among = list(range(rounds)) if among is None else list(among)
    by_kind = {k: v for (_, k), v in p50s.items()}
    kinds = [k for k in KIND_ORDER if k in by_kind]
    if len(kinds) < 2 or "untraced" not in by_kind:
        return [0.0] * rounds
    base = statistics.median(by_kind["untraced"][r] for r in among)
    diffs = [[by_kind[b][r] - by_kind[a][r] for r in range(rounds)] for a, b in zip(kinds, kinds[1:])]
    meds = [statistics.median(d[r] for r in among) for d in diffs]
    return [max(abs(d[r] - m) for d, m in zip(diffs, meds)) * 100 / base for r in range(rounds)]


def fastest_round(p50s):
    """(round, the rounds that agree with it) of one case when no sweep settled: of the rounds whose
    kinds ran in one level of the host's speed (straddle_pct within SWEEP_AGREE_PCT; else the one that
    strays least), the one whose runs are together the fastest (least sum of ln p50 over the kinds),
    i.e. every kind in the host's faster level at once. Why: with the level changing inside every
    sweep (every few seconds), the kept sweep's sizes straddle levels and the model misses by 5-17 %;
    a level is the host's, so each size's fastest whole round puts every size in the same one (the
    slower level's rounds spread more: sizes disagree about which of them is "the" slow level). The
    least sum alone can come from one kind's fast run beside slow ones (14 % of the RTT off the
    others' probe effect), which no correction mends.
    p50s: {(case, kind): [p50 per round]} of one case."""
    rounds = min(len(v) for v in p50s.values())
    stray = straddle_pct(p50s)
    whole = [q for q in range(rounds) if stray[q] <= SWEEP_AGREE_PCT] or [min(range(rounds), key=lambda q: stray[q])]
    r = min(whole, key=lambda q: (sum(math.log(v[q]) for v in p50s.values()), q))
    dist = sweep_distances(p50s)
    return r, [q for q in range(rounds) if dist[r][q] <= SWEEP_AGREE_PCT]


# This VM's speed levels lie 20-30 % apart (collectors/README.md); the runs of one level within a few %.
# A run more than LEVEL_GAP above the fastest round of its case and kind is in a slower level.
LEVEL_GAP = 0.10
# A round whose probe effect strays from the others' by more than this (% of the RTT, straddle_pct) had
# a kind in another level: a switch moves one kind's p50 by 20-30 %, while the probe effect of the two
# levels differs by 3-5 % (UDP 8032).
STRADDLE_LEVEL_PCT = 100 * LEVEL_GAP / 2


def run_levels(p50s, order=None):
    """{(case, kind): [0 in the faster level, 1 in a slower one, per round]}. A case and kind whose
    rounds spread over more than LEVEL_GAP saw both levels: a run within LEVEL_GAP of its fastest round
    is in the faster level, else in a slower one. A case and kind whose rounds all lie within LEVEL_GAP
    of each other ran in one level, but which one its p50s cannot say: a level is the host's at a time,
    so all its rounds take the level that most of the runs nearest them in time had (of the others,
    the one before and the one after each round, in the order the capture ran them: round by round,
    case by case in `order`, kind by kind; the faster level on a tie, and when no case and kind saw
    both levels).

    Why: where the host is fast for one round only, a kind whose runs are slow in every round would be
    called fast by its own fastest round; then a size can have no whole round in the slower level, the
    faster level can win on a tie, and such sizes fall back to slow rounds beside fast sizes (the model
    then misses them by +14 to +19 %). p50s: {(case, kind): [p50 per round]}; order: its keys in the
    order of one round (default: p50s')."""
    order = list(order or ()) + [k for k in p50s if k not in (order or ())]
    levels = {k: [0 if x <= min(v) * (1 + LEVEL_GAP) else 1 for x in v] for k, v in p50s.items()}
    both = {k: lv for k, lv in levels.items() if any(lv)}
    if not both:
        return levels
    n, pos = len(order), {k: i for i, k in enumerate(order)}
    timeline = sorted((r * n + pos[k], lv) for k, lvs in both.items() for r, lv in enumerate(lvs))
    times = [t for t, _ in timeline]

    def nearest(t):
        i = bisect.bisect_left(times, t)
        return [timeline[j][1] for j in (i - 1, i) if 0 <= j < len(timeline)]
    for k, lv in levels.items():
        if k not in both:
            votes = [x for r in range(len(lv)) for x in nearest(r * n + pos[k])]
            levels[k] = [int(2 * sum(votes) > len(votes))] * len(lv)
    return levels


def level_rounds(p50s, cases):
    """When no sweep settled: (the level, {case: (round, the rounds that agree with it)}) with every
    case's kept round in one level of the host's speed (0 the faster, 1 a slower one). A round of a
    case is whole in a level when each of its kinds' runs is (run_levels) and its probe effect agrees
    with theirs (straddle_pct among them, when there are three or more, else among every round,
    within STRADDLE_LEVEL_PCT); the level is the one in which the most cases have a whole round, the
    faster of equals; each case keeps, of its whole rounds in that level, the most central (the least
    sum over its kinds of |ln p50 - their median|), and a case with none there its fastest whole round
    (fastest_round). The probe effect guards against a round whose kinds ran in levels LEVEL_GAP
    cannot tell apart (a host with three levels, where a "fast" round's user-only run can be 16 us
    faster than its untraced one), and the count of cases against a level where one size has no
    whole round. Why not each size's fastest whole round alone: the probe effect differs between
    levels (UDP 8032: traced minus user-only 29.5 us in the faster level, 26.6 in the slower), so
    straddle_pct, measured against the median over the rounds, refuses a size's fast rounds when most
    of its rounds are slow, and it would keep a slow one beside sizes kept fast (the model then misses
    that size by ~18 %). p50s: {(case, kind): [p50 per round]}; cases: the case ids."""
    levels = run_levels(p50s, [(c, k) for c in cases for k in KIND_ORDER if (c, k) in p50s])
    rounds = min(len(v) for v in p50s.values())
    by_case = {c: {k: v for k, v in p50s.items() if k[0] == c} for c in cases}

    def candidates(mine, level):
        whole = [r for r in range(rounds) if all(levels[k][r] == level for k in mine)]
        stray = straddle_pct(mine, whole if len(whole) >= 3 else None)
        return [r for r in whole if stray[r] <= STRADDLE_LEVEL_PCT]
    cand = {(c, lv): candidates(by_case[c], lv) for c in cases for lv in (0, 1)}
    level = min((0, 1), key=lambda lv: (-sum(1 for c in cases if cand[c, lv]), lv))
    out = {}
    for c in cases:
        mine = by_case[c]
        rs = cand[c, level]
        if not rs:
            out[c] = fastest_round(mine)
            continue
        r = most_central(mine, rs)
        dist = sweep_distances(mine)
        out[c] = (r, [q for q in rs if dist[r][q] <= SWEEP_AGREE_PCT])
    return level, out


def settled_rounds(p50s, case, kept, agreeing):
    """(round, the rounds that agree with it) of one case of a transport whose sweeps settled: the kept
    sweep's round and the agreeing ones, less those whose probe effect strays from the case's other
    rounds' by more than STRADDLE_LEVEL_PCT (straddle_pct over every round): one of its kinds caught a
    burst the sweep's distance, an rms over every case, does not show. If the kept round is such a
    round, the most central of the others (the least sum over its kinds of |ln p50 - their median|).
    Why: a kept round's untraced run can be 9 % slow (slower than its user-only run), as another
    agreeing round's, and then Measured, the median of three, is 9 % high and the model misses that
    size by as much. About one case in ten drops a round this way, one in a hundred changes its kept
    one.
    p50s: {(case, kind): [p50 per round]}."""
    mine = {k: v for k, v in p50s.items() if k[0] == case}
    stray = straddle_pct(mine)
    whole = [r for r in agreeing if stray[r] <= STRADDLE_LEVEL_PCT]
    if not whole:
        return kept, agreeing
    return (kept if kept in whole else most_central(mine, whole)), whole


def most_central(p50s, rounds):
    """Of rounds, the one nearest the middle of them all: the least sum over its kinds of |ln p50 - the
    kind's median over rounds| (the earliest of equals). p50s: {(case, kind): [p50 per round]} of one case."""
    med = {k: statistics.median(math.log(v[r]) for r in rounds) for k, v in p50s.items()}
    return min(rounds, key=lambda q: (sum(abs(math.log(v[q]) - med[k]) for k, v in p50s.items()), q))


def _probe_effects(p50s):
    """{(case, kind): [ln(p50 / the round's untraced p50) per round]} for every kind but untraced."""
    return {(c, k): [math.log(x / u) for x, u in zip(v, p50s[(c, "untraced")])]
            for (c, k), v in p50s.items() if k != "untraced" and (c, "untraced") in p50s}


def turns_kept_round(p50s):
    """The round whose sizes stand to each other, in every kind, as in most rounds once the host's
    moments are taken out: the least sum of |x - its median over the rounds|, x = for each case's kind
    ln(p50 / the case's factor in the round) less its mean over the round's cases, and for each case
    ln(the case's factor / the round's speed) (case_factors, round_speeds). Ties (a capture of one size)
    go to the round whose kinds stand to each other as in most rounds (the same sum without the round's
    mean taken out), then to the earliest.
    Why the sizes against each other and not each size's probe effect against its own median: the
    rounds of one capture can alternate between two regimes of the host in which every size's probe
    effect is 10-15 % larger or smaller, and the round nearest every size's median can then lie between
    them with its sizes 1-2 us apart from each other. Its traces give every size's step costs and
    path, and the probe costs are solved within it (analysis/probe.py case_point), so what its sizes
    share moves none of them against the others; what moves one size against the others is what the
    model would take for a unit cost. p50s: {(case, kind): [p50 per round]}."""
    factors, speed = case_factors(p50s), round_speeds(p50s)
    n = len(speed)
    own = {key: [math.log(x / f) for x, f in zip(v, factors[key[0]])] for key, v in p50s.items()}
    kinds = {k for _, k in p50s}
    mean = {k: [statistics.mean(v[r] for (_, kk), v in own.items() if kk == k) for r in range(n)] for k in kinds}
    shape = [[v[r] - mean[key[1]][r] for r in range(n)] for key, v in own.items()]
    sizes = [[math.log(f / q) for f, q in zip(v, speed)] for v in factors.values()]
    by_shape = [(v, statistics.median(v)) for v in shape + sizes]
    by_kinds = [(v, statistics.median(v)) for v in [*own.values(), *sizes]]

    def score(devs, r):
        return round(sum(abs(v[r] - m) for v, m in devs), 9)
    return min(range(n), key=lambda r: (score(by_shape, r), score(by_kinds, r), r))


def turns_spread_pct(p50s):
    """The median over cases and kinds of half the spread of 100 ln(p50 / the round's untraced p50)
    over the rounds: how far a probe effect moves from round to round when the runs take turns."""
    spreads = [100 * (max(v) - min(v)) / 2 for v in _probe_effects(p50s).values() if len(v) > 1]
    return round(statistics.median(spreads), 2) if spreads else None


def round_speeds(p50s):
    """Each round's speed relative to the rounds' middle: exp of the mean over every case and kind of
    ln(p50 / the kind's median over the rounds); 1.1 a round whose runs all took 10 % longer. The
    manifest's record of how far the rounds moved as a whole (sweeps.<t>.turns.round_speed); the figures
    take each case's own factor (case_factors), for a round moves the sizes unlike each other. Every
    case of a capture has the same kinds, so the mean over cases and kinds is the mean over the cases
    of their factors' logs. p50s: {(case, kind): [p50 per round]}."""
    factors = list(case_factors(p50s).values())
    n = min((len(f) for f in factors), default=0)
    return [round(math.exp(sum(math.log(f[r]) for f in factors) / len(factors)), 5) for r in range(n)]


def turn_buffer_kb(calls, frags):
    """A tracefs ring per CPU for one traced run taking turns (one instance a case): room for its
    events, ~40 a fragment and 40 more a call at ~48 bytes (manifest events_per_call: UDP 24096, 6
    fragments, 190 a call), twice over, between 8 MiB and the sequential runs' 256 MiB. Why not 256 MiB
    each: a transport's cases hold theirs at once."""
    need = calls * (40 + 40 * frags) * 48 * 2 // 1024
    return int(min(ftrace.BUFFER_KB, max(8192, need)))



def run_pace_ns(res):
    """A run's CPU pace: the mean of the fastest slices rpc-client timed before and after its calls
    (--pace-slices), in ns; None where it timed none."""
    pace = res.get("pace") or {}
    mins = [pace[w]["min_ns"] for w in ("before", "after") if (pace.get(w) or {}).get("slices")]
    return round(sum(mins) / len(mins)) if mins else None


def cpu_speed_summary(cpu):
    """One CPU of rpc-cpuspeed's JSON, its slices' times summed (the manifest keeps no slice): {"cpu",
    "slices", "min_ns", "p50_ns", "max_ns", "sum_ns"}. With the run's fastest slice on that CPU, sum_ns
    gives the share of the check's time the CPU lost (analysis/cpuspeed.py lost_pct)."""
    return {"cpu": cpu["cpu"], "slices": cpu["slices"], "min_ns": cpu["min_ns"], "p50_ns": cpu["p50_ns"],
            "max_ns": cpu["max_ns"], "sum_ns": sum(cpu["slice_ns"])}


def sleeps_per_call(res, server_stats_path, ipis=None, calls=None, turn_waits=(0, 0)):
    """How often the client and the server slept per call in one run: the client's voluntary context
    switches over its measured calls (rpc-client --json "switches") and the server's since it started
    (--stats-json, all threads) per request it received. A sleep is a wait that blocked, so two runs
    whose counts differ took different paths (a reply or fragment that came before or after its reader
    waited), which no tracing is needed to see. With ipis (ipi_delta over the client's run of `calls`
    calls, warm-up included): the interrupts per call each CPU got from the other, "client_ipi" and
    "server_ipi": a wake-up whose wakee had not yet left its CPU, or whose CPU was not polling, is sent
    as an interrupt, which costs this VM ~12 us where a polling CPU's costs about none.
    A traced server's count includes its tracer's threads (LTTng-UST's: ~0.03 a request here).
    turn_waits (--turns): (the client's waits for a turn while it measured, its turns): those are no
    part of a call, and each turn's gap costs the server at most one sleep more; both are taken off.
    None where the binaries predate the counts."""
    sw = res.get("switches")
    try:
        st = json.loads(pathlib.Path(server_stats_path).read_text())
    except (OSError, ValueError):
        st = {}
    if not sw or not res.get("calls") or "voluntary_switches" not in st or not st.get("requests"):
        return None
    out = {"client": round(max(0, sw["voluntary"] - turn_waits[0]) / res["calls"], 3),
           "server": round(max(0, st["voluntary_switches"] - turn_waits[1]) / st["requests"], 3)}
    if ipis and calls:
        out.update({f"{role}_ipi": round(n / calls, 3) for role, n in ipis.items()})
    return out



def rtt_record(res):
    """A run's RTT record (manifest cases[].untraced, traced, ust_only): rpc-client's percentiles and counts."""
    r = dict(res.get("rtt_ns", {}))
    r.update({"calls": res.get("calls"), "errors": res.get("errors"), "calls_per_s": res.get("calls_per_s"),
              "unit": "ns"})
    if "first_call_ns" in res:
        r["first_call_ns"] = res["first_call_ns"]
    return r


