"""The model's % error over several runs: per run, per transport and size, and gathered per size.

One run's % error table says how one capture went; whether the model is within its goals
(|% error| <= 2 % at fitted sizes, <= 5 % at held-out ones) is a question over many runs, which this
answers: per size, the median, least and greatest % error over the runs, and in how many runs it met
its goal. The errors are the ones each run's model files hold (analysis/model.json and
model-TRANSPORT.json, as `rpcscope run` writes them), or, with refit, the model fitted again from
each run's probe-corrected round-trip path (analysis/rtp.json) by this checkout's analysis/model.py,
as `rpcscope model RUN --corrected --transport T --holdout H` would: the way to see what a change of
the model does to runs captured before it.
"""
import json
import statistics
from pathlib import Path

from . import model as M


def _with_paths(run, errs, manifest=None):
    """errs with each row's untraced_path_same (analysis/run.py path_shape of the run's case of that
    transport and size: False where its untraced run took another path than the traced one), and where
    its untraced calls fall in several modes (analysis/run.py untraced_modes), untraced_p50_mode: which
    of them holds the p50."""
    from .run import error_row_paths
    if manifest is None:
        try:
            manifest = json.loads((Path(run) / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {}
    proc = (manifest.get("params") or {}).get("proc")
    cases = {(c.get("transport"), c.get("size")): c for c in manifest.get("cases") or []
             if proc is None or c.get("proc") == proc}
    for t, rows in errs.items():
        for r in rows:
            r.update(error_row_paths(run, cases.get((t, r["size"])), r.get("calculated_us")))
    return errs


def saved_errors(run):
    """{transport: [error rows]} from a run's model files (analysis/model.json, model-T.json)."""
    out = {}
    for f in sorted((Path(run) / "analysis").glob("model*.json")):
        m = M.load_model(f)
        stem = f.stem
        out[m.params.get("transport") or (stem.split("-", 1)[1] if "-" in stem else "udp")] = m.error_rows()
    if not out:
        raise ValueError(f"{run}: no model file in analysis/ (run `rpcscope model {run} --corrected`, "
                         f"or give --refit)")
    return _with_paths(run, out)


def refit_errors(run, holdout=None):
    """{transport: [error rows]} of the model fitted again from the run's corrected round-trip path, for
    every transport the run captured; holdout: the sizes held out (default: the capture's --holdout)."""
    from .rtp import rtp_steps
    run = Path(run)
    try:
        manifest = json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{run}: no readable manifest.json ({e})") from None
    params = manifest.get("params") or {}
    held = (params.get("holdout") or []) if holdout is None else holdout
    out = {}
    for t in params.get("transports") or []:
        costs = M.load_costs(run, corrected=True, transport=t)
        path = rtp_steps(run, transport=costs.params.get("transport"), proc=costs.params.get("proc"))
        if not path:
            raise ValueError(f"{run}: no round-trip path for {t} (run `rpcscope rtp {run}` first)")
        costs, steps = M.with_rtp(costs, path, corrected=True)
        out[t] = M.fit(costs, holdout=[s for s in held if s in costs.sizes], steps=steps).error_rows()
    return _with_paths(run, out, manifest)


def gather(per_run):
    """per_run: [(run name, {transport: [error rows]})] -> (run rows, size rows). A run row: run, met,
    sizes, misses ("udp 1392: +2.4", "udp 8032: +25.2 other path" where the untraced run took another
    path than the traced one: untraced_path_same False), other_path (how many such sizes); a size row:
    transport, size, fit, goal, runs, median, least and greatest % error, runs that met the goal,
    other_path (runs whose untraced run took another path there) and met_same_path (of the others, the
    runs that met it)."""
    runs, by_size = [], {}
    for name, errs in per_run:
        met = sizes = other = 0
        misses = []
        for t, rows in errs.items():
            for r in rows:
                if r.get("percent_error") is None:
                    continue
                sizes += 1
                met += bool(r["goal_met"])
                away = r.get("untraced_path_same") is False
                other += away
                if not r["goal_met"]:
                    misses.append(f"{t} {r['size']}: {r['percent_error']:+.1f}" + (" other path" if away else "")
                                  + (f" ({r['untraced_p50_mode']})" if r.get("untraced_p50_mode") else ""))
                by_size.setdefault((t, r["size"], r["holdout"], r["goal_pct"]), []).append(r)
        runs.append({"run": name, "met": met, "sizes": sizes, "misses": misses, "other_path": other})
    order = {t: i for i, t in enumerate(("udp", "tcp"))}
    sizes = []
    for (t, s, held, goal), rows in sorted(by_size.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][0],
                                                                              kv[0][1], kv[0][2])):
        e = [r["percent_error"] for r in rows]
        sizes.append({"transport": t, "size": s, "fit": "holdout" if held else "fitted", "goal_pct": goal,
                      "runs": len(e), "median_pct": statistics.median(e), "least_pct": min(e),
                      "greatest_pct": max(e), "met": sum(bool(r["goal_met"]) for r in rows),
                      "other_path": sum(r.get("untraced_path_same") is False for r in rows),
                      "met_same_path": sum(bool(r["goal_met"]) for r in rows if r.get("untraced_path_same") is not False)})
    return runs, sizes
