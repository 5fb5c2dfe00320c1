"""The target model's outputs: `rpcscope model RUN` on a run of `rpcscope run --target`, and the model
tables `run --target` prints after its first screens; the model file analysis/targetmodel-TRANSPORT.json.

    models, notes = run_models(rundir, summaries)      # every transport that has enough sizes; writes files
    print_model(m)
"""
from __future__ import annotations

import json

from rpcscope.output import UserError, emit_json, table
from rpcscope.rundir import RunDir

from . import targetmodel as T
from .unitcosts import params_table

MULTI_EXCHANGE = 1.05     # exchanges a call above which a case's path is one exchange of several


def _f(v, nd=2):
    return "" if v is None else round(v, nd)


def _cases(summaries, transport):
    """({size: summary}, [sizes left out]) of one transport's cases whose path is the whole call (one
    exchange a call). Of a size's rounds, the one with the median path is kept (the lower of the two
    middle ones for an even count), with every round's path beside it (round_paths_us)."""
    by, left = {}, set()
    for s in summaries:
        if s["transport"] != transport:
            continue
        if s["exchanges_per_call"] > MULTI_EXCHANGE:
            left.add(int(s["size"]))
        elif s.get("model_input"):
            by.setdefault(int(s["size"]), []).append(s)
    out = {}
    for z, rounds in by.items():
        rounds.sort(key=lambda s: s["model_input"]["path_us"])
        out[z] = dict(rounds[(len(rounds) - 1) // 2], round_paths_us=[s["model_input"]["path_us"] for s in rounds])
    return out, sorted(left)


def run_models(rundir, summaries, fit=None, predict=(), transports=None, write=True):
    """([TargetModel], [note]) of a target run's transports; each model file written unless write is False."""
    rd = RunDir(rundir)
    try:
        target = json.loads(rd.target_json.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{rd.target_json}: {e}; re-run `rpcscope run --target ...`") from None
    models, notes = [], []
    for t in transports or sorted({s["transport"] for s in summaries}):
        cases, left = _cases(summaries, t)
        if not cases and not left:
            notes.append(f"{t}: this run has no {t} case")
            continue
        if left:
            notes.append(f"{t}: size(s) {', '.join(map(str, sorted(left)))} left out of the model: more than one "
                         f"exchange a call, whose kernel-only path is one exchange's")
        try:
            m = T.build(target["target"], t, target.get("proc", ""), cases,
                        fit_sizes=[z for z in fit if z not in left] if fit else None, predict=predict)
        except T.TargetModelError as e:
            notes.append(f"{t}: {e}")
            continue
        models.append(m)
        if write:
            rd.analysis.mkdir(parents=True, exist_ok=True)
            (rd.analysis / f"targetmodel-{t}.json").write_text(json.dumps(m.to_json(), indent=1) + "\n")
    return models, notes


def print_model(m):
    print(f"model: {m.target} {m.transport.upper()} {m.proc}, path {'KC1, K1..K11, KC2' if m.with_edges else 'K1..K11'}"
          f", {'probe-corrected' if m.corrected else 'as traced'}; fitted at {', '.join(map(str, m.fitted))}"
          + (f"; gRPC header frames {m.header_bytes[0]} + {m.header_bytes[1]} bytes (from the trace)"
             if any(m.header_bytes) else ""))
    params_table(m.params)
    print()
    table([{"size": r.size, "kind": r.kind, "path_us": _f(r.measured_us), "spread_%": _f(r.spread_pct, 1),
            "model_us": _f(r.model_us),
            "model_%": _f(r.error_pct), "cv_%": _f(r.cv_error_pct), "interp_%": _f(r.interp_error_pct),
            "line_%": _f(r.line_error_pct), "program_us": _f(r.program_us), "path_vs_prog_%": _f(r.path_vs_program_pct),
            "bytes q/r": f"{r.request_bytes}/{r.reply_bytes}"
                         + (f" (trace {r.measured_bytes[0]:g}/{r.measured_bytes[1]:g})" if r.measured_bytes else "")}
           for r in m.rows],
          ["size", "kind", "path_us", "spread_%", "model_us", "model_%", "cv_%", "interp_%", "line_%", "program_us",
           "path_vs_prog_%", "bytes q/r"])
    s = m.summary()
    if s["predicted_sizes"]:
        p = s["predicted_mean_abs_error_pct"]
        print(f"mean |% error| over {s['predicted_sizes']} predicted size(s): model {_f(p['model'])}, interpolation "
              f"{_f(p['interpolation'])}, line {_f(p['line'])}")
    c = s["cv_mean_abs_error_pct"]
    print(f"mean |% error| over {s['cv_sizes']} fitted size(s), each left out of its own fit: model {_f(c['model'])}, "
          f"interpolation {_f(c['interpolation'])}, line {_f(c['line'])}" if s["cv_sizes"] else
          f"no size is left out of its own fit: that takes {T.MIN_SIZES + 1} fitted sizes or more")
    print("% error = (path - calculated) x 100 / path; path: the typical call's kernel-only path total (of the "
          "median round where a case has several; spread_%: half the rounds' spread over it); "
          "program_us: the program's median (untraced where the path is probe-corrected, else the traced run's); "
          "path_vs_prog_%: what it holds beyond the path")


def cmd_target_model(run, fit=None, predict=(), transport=None, as_json=False):
    """`rpcscope model RUN` where RUN is a target run: the model of its kernelonly.json, printed and written.
    fit: the sizes to fit (default every captured one); predict: more sizes to calculate."""
    rd = RunDir(run)
    try:
        doc = json.loads(rd.kernelonly_json.read_text())
    except FileNotFoundError:
        raise UserError(f"{run} has no analysis yet ({rd.kernelonly_json} is not there): `rpcscope analyze {run}` "
                        f"makes it") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{rd.kernelonly_json}: unreadable ({e}): `rpcscope analyze {run}` makes it again") from None
    transports = [transport] if transport else None
    cases = doc.get("cases", [])
    if not any(c.get("model_input") for c in cases):
        raise UserError(f"{rd.kernelonly_json} has no model inputs: analyze it again with `rpcscope analyze "
                        f"{run}`")
    models, notes = run_models(run, cases, fit, predict, transports)
    if as_json:
        emit_json({"models": [m.to_json() for m in models], "notes": notes})
        return 0 if models else 1
    if not models:
        raise UserError("no model: " + "; ".join(notes))
    for m in models:
        print_model(m)
        print(f"written: {rd.analysis / f'targetmodel-{m.transport}.json'}\n")
    for n in notes:
        print(f"note: {n}")
    return 0
