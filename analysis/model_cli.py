"""rpcscope model / whatif / verify: fit the unit costs, predict elsewhere, check a prediction."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rpcscope import units
from rpcscope.output import UserError, emit_json, table
from rpcscope.rundir import VERIFY_FORMAT, RunDir

from . import model as M, network as N, paper
from .model_input import measured_us, observations
from .targetmodel_cli import cmd_target_model
from .unitcosts import params_table

MODEL_EPILOG = """examples:
  rpcscope model runs/NAME --transport udp
        fit the unit costs at every captured size but the capture's held-out ones, predict those;
        writes runs/NAME/analysis/model-udp.json
  rpcscope model runs/NAME --transport tcp --fit 0,1392,4016,8032,16064,24096 --predict 100000
  rpcscope model runs/NAME --transport udp --json
  rpcscope model --paper dce        the DCE study's Table 2 added up again beside its printed sums
  rpcscope model runs/TARGET --fit 0,1392,4016 --predict 8000
        a run of `rpcscope run --target`: its kernel-only paths' unit costs (analysis/TARGET.md, the
        model); writes runs/TARGET/analysis/targetmodel-TRANSPORT.json

Each size is fitted (in the fit; its row also shows the fit without it: cv) or predicted (nothing
measured at that size enters its row but Measured). interp and line are the baselines: linear
interpolation of the fitted sizes' untraced RTTs, and A + B x bytes + C x packets through them.
% Error = (Measured - Calculated) x 100 / Measured (the DCE study's sign: positive when the model
is short). Goals: within 2 % at fitted sizes, 5 % at predicted ones. analysis/MODEL.md defines
every term.
"""

WHATIF_EPILOG = """examples:
  rpcscope whatif runs/A/analysis/model-udp.json --link-rate 10mbit --predict 0,1392,4016,8032 --out p.json
        a model fitted on the unshaped testbed, predicted for the testbed shaped to 10 Mbit/s
  rpcscope whatif model-tcp.json --mtu 9000 --predict 0,8032,24096
  rpcscope whatif model-udp.json --link-rate 10mbit --link serial     the papers' Ethernet, a serial line
  rpcscope verify p.json runs/B                                        then check it against a capture

--link tbf (the default with a rate) is the token bucket `rpcscope testbed up --link-rate` installs;
serial is a line that delays every frame by its bits over the rate.
"""

VERIFY_EPILOG = """examples:
  rpcscope run --link-rate 10mbit --sizes 0,1392,4016,8032 --holdout '' --out runs/shaped
  rpcscope verify p.json runs/shaped

Measured is the capture's untraced p50 (the kept round's) for the prediction's transport and
procedure. % Error = (Measured - Predicted) x 100 / Measured; goal: within 5 %. Where the link adds
no wire time, %error_vs_null is the same with each side over its own null call (size 0), which
takes out the host's speed between the model's capture and this one. The table is written to
RUN/analysis/verify-TRANSPORT.json, and `rpcscope report RUN` shows it.
"""


def parse_sizes(text, option):
    """The option's sizes (rpcscope/units.py), none for nothing; a UserError for bad ones."""
    try:
        return units.parse_sizes(text, option, allow_empty=True)
    except units.UnitError as e:
        raise UserError(str(e)) from None


def _f(v, nd=2):
    return "" if v is None else round(v, nd)


def _held_out(run_dir):
    try:
        man = json.loads(RunDir(run_dir).manifest_path.read_text())
        return [int(x) for x in ((man.get("params") or {}).get("holdout") or [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def rows_table(rows, out=None):
    table([{"size": r.size, "kind": r.kind, "measured_us": _f(r.measured_us), "spread_%": _f(r.measured_spread_pct, 1),
            "model_us": _f(r.calculated_us), "model_%": _f(r.error_pct), "cv_%": _f(r.cv_error_pct),
            "interp_%": _f(r.interp_error_pct), "line_%": _f(r.line_error_pct), "goal": f"{r.goal_pct:g} %",
            "met": "" if r.error_pct is None else ("yes" if abs(r.error_pct) <= r.goal_pct else "NO")} for r in rows],
          ["size", "kind", "measured_us", "spread_%", "model_us", "model_%", "cv_%", "interp_%", "line_%", "goal",
           "met"],
          out=out)


def print_model(m, rows, written=None):
    print(f"model: {m.obs.transport} {m.obs.proc} from {m.obs.source}; link: {m.obs.link.describe()}")
    print(f"fitted at {', '.join(map(str, m.fitted))} ({m.iterations} iterations of counts and costs)\n")
    params_table(m.params())
    print()
    rows_table(rows)
    s = m.summary(rows)
    mae = s["mean_abs_error_pct"]
    if s["predicted_sizes"]:
        print(f"\nmean |% error| over {s['predicted_sizes']} predicted size(s): model {_f(mae['model'])}, "
              f"interpolation {_f(mae['interpolation'])}, line {_f(mae['line'])}")
    cv = s["cv_mean_abs_error_pct"]
    print(f"mean |% error| over the fitted sizes, each left out of its own fit: model {_f(cv['model'])}, "
          f"interpolation {_f(cv['interpolation'])}, line {_f(cv['line'])}")
    print("% error = (measured - calculated) x 100 / measured; measured: the untraced p50 RTT of the round whose "
          "traces the fit used; spread_%: half the spread of every round's untraced p50")
    for k, v in m.obs.inputs.items():
        if k in ("unclassified_segments", "sizes_without_path"):
            print(f"note: {k.replace('_', ' ')}: {v}")
    if written:
        print(f"\nwritten: {written}")


def cmd_model(args):
    if args.paper:
        if args.input:
            raise UserError("--paper takes no run directory")
        return _paper(args)
    if not args.input:
        raise UserError("give a run directory (rpcscope capture, analyze and rtp make one) or --paper dce")
    if RunDir(args.input).is_target:
        return cmd_target_model(args.input, parse_sizes(args.fit, "--fit") if args.fit else None,
                                parse_sizes(args.predict, "--predict") or [], args.transport, args.json)
    args.transport = args.transport or "udp"
    try:
        obs = observations(args.input, args.transport, args.proc)
        held = parse_sizes(args.holdout, "--holdout") if args.holdout is not None else _held_out(args.input)
        fit_sizes = parse_sizes(args.fit, "--fit") if args.fit else [z for z in obs.sizes if z not in set(held)]
        lacking = [z for z in fit_sizes if not (obs.sizes.get(z) and obs.sizes[z].path_us)]
        if lacking:
            raise UserError(f"no measured round-trip path at fitted size(s) {', '.join(map(str, lacking))}: "
                            f"run `rpcscope rtp {args.input}`, or leave them out with --fit")
        m = M.fit(obs, fit_sizes)
        rows = m.rows(parse_sizes(args.predict, "--predict") or [])
    except M.ModelError as e:
        raise UserError(str(e)) from None
    out = Path(args.out) if args.out else RunDir(args.input).model_json(args.transport)
    doc = m.to_json(parse_sizes(args.predict, "--predict") or [])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.json:
        emit_json(dict(doc, written=str(out)))
        return 0
    print_model(m, rows, out)
    return 0


def _paper(args):
    cols = paper.sums()
    rnd = paper.rounding_us()
    if args.json:
        emit_json({"source": "DCE study, Table 2 (analysis/data)", "rows": [r.__dict__ for r in paper.table2()],
                   "sizes": [c.__dict__ for c in cols], "rounding_us": rnd,
                   "error_sign": "% Error = (Measured - Calculated) x 100 / Measured"})
        return 0
    print("the DCE study's Table 2 (analysis/data), its rows added up again:")
    table([{"size": c.size, "rows_sum_us": c.calculated_us, "printed_sum_us": c.printed_calculated_us,
            "diff_us": c.calculated_us - c.printed_calculated_us, "measured_us": c.measured_us,
            "%error": _f(c.error_pct), "printed_%error": c.printed_error_pct} for c in cols],
          ["size", "rows_sum_us", "printed_sum_us", "diff_us", "measured_us", "%error", "printed_%error"])
    print("the transcribed rows add up to 12 us over the printed sums in every column: one row common to all "
          "three is misread by that much in the scan (the CSV's header)")
    return 0


def cmd_whatif(args):
    try:
        m = M.Model.from_json(json.loads(Path(args.model).read_text()))
    except FileNotFoundError:
        raise UserError(f"{args.model}: no such model file (rpcscope model RUN writes one)") from None
    except (OSError, ValueError) as e:
        if isinstance(e, M.ModelError):
            raise UserError(f"{args.model}: {e}") from None
        raise UserError(f"{args.model}: not a model file ({e})") from None
    base = m.obs.link
    try:
        rate = units.parse_rate(args.link_rate) if args.link_rate is not None else base.rate_bps
        kind = args.link or ("tbf" if rate and args.link_rate is not None else base.kind if rate else "none")
        link = N.Link(kind, rate if kind != "none" else None, args.mtu or base.mtu,
                      base.latency_us if args.latency_us is None else args.latency_us)
    except units.UnitError as e:
        raise UserError(f"--link-rate {e}") from None
    except N.LinkError as e:
        raise UserError(str(e)) from None
    sizes = parse_sizes(args.predict, "--predict") or sorted(m.obs.sizes)
    try:
        pred = M.prediction(m, sizes, link)
        before = M.prediction(m, sizes, base)
    except (M.ModelError, ValueError) as e:
        raise UserError(str(e)) from None
    if args.out:
        Path(args.out).write_text(json.dumps(pred, indent=1) + "\n")
    if args.json:
        emit_json(dict(pred, **({"written": args.out} if args.out else {})))
        return 0
    print(f"model: {m.obs.transport} {m.obs.proc} from {m.obs.source}")
    print(f"from: {base.describe()}\nto:   {link.describe()}\n")
    table([{"size": a["size"], "model_link_us": _f(b["calculated_us"]), "predicted_us": _f(a["calculated_us"]),
            "cpu_us": _f(a["cpu_us"]), "wire_us": _f(a["wire_us"]), "set_by": a["paced_by"]}
           for a, b in zip(pred["rows"], before["rows"])],
          ["size", "model_link_us", "predicted_us", "cpu_us", "wire_us", "set_by"])
    if args.out:
        print(f"\nwritten: {args.out} (check it against a capture on that link: rpcscope verify {args.out} RUN)")
    return 0


def prediction_link(pred, path):
    """The link a prediction file (rpcscope whatif --out) was made for, or a UserError naming what is wrong."""
    if not isinstance(pred.get("link"), dict) or not isinstance(pred.get("rows"), list) or \
            not all(isinstance(r, dict) and "size" in r and "calculated_us" in r for r in pred["rows"]) or \
            not pred.get("transport") or not pred.get("proc"):
        raise UserError(f"{path}: a prediction file needs its transport, proc, link and rows of size and "
                        f"calculated_us (rpcscope whatif --out writes one)")
    try:
        return N.Link.from_json(pred["link"])
    except (N.LinkError, TypeError, ValueError) as e:
        raise UserError(f"{path}: its link is not usable ({e}); make the prediction again with rpcscope whatif") \
            from None


def verify_rows(pred, run_dir, want):
    try:
        man = json.loads(RunDir(run_dir).manifest_path.read_text())
    except FileNotFoundError:
        raise UserError(f"{run_dir}: not a run directory (no manifest.json)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{run_dir}/manifest.json is unreadable: {e}") from None
    cases = {int(c["size"]): c for c in man.get("cases") or [] if isinstance(c, dict)
             and c.get("transport") == pred["transport"] and c.get("proc") == pred["proc"]}
    rows = []
    for r in pred["rows"]:
        c = cases.get(r["size"])
        m, spread = measured_us(c) if c else (None, None)
        err = M.percent_error(m, r["calculated_us"])
        rows.append({"size": r["size"], "predicted_us": r["calculated_us"], "measured_us": m, "spread_pct": spread,
                     "error_pct": err, "met": None if err is None else abs(err) <= M.PREDICT_GOAL_PCT})
    _vs_null(rows, want)
    link = ((man.get("testbed") or {}).get("link") or {})
    return rows, link


def _vs_null(rows, link):
    """Each row's `vs_null_error_pct`: its % error once each side is taken over its own null call
    (measured / measured at size 0 beside predicted / predicted at size 0), where the link adds no wire
    time: a null call is then one small packet whatever the MTU, and what it measured against its
    prediction is the host's speed between the model's capture and this one, not the model. None
    elsewhere (a shaped link paces the null call too, or no null call on either side)."""
    null = next((r for r in rows if r["size"] == 0 and r["measured_us"] and r["predicted_us"]), None)
    for r in rows:
        r["vs_null_error_pct"] = None
        if link.kind != "none" or null is None or r is null or not r["measured_us"]:
            continue
        m, p = r["measured_us"] / null["measured_us"], r["predicted_us"] / null["predicted_us"]
        r["vs_null_error_pct"] = M.percent_error(m, p)


VERIFY_COLUMNS = ["size", "predicted_us", "measured_us", "spread_%", "%error", "met", "%error_vs_null"]


def verify_table_rows(rows):
    """verify_rows' rows as printed, by `rpcscope verify` and by the report (reports/verify_section.py)."""
    return [{"size": r.get("size"), "predicted_us": _f(r.get("predicted_us")), "measured_us": _f(r.get("measured_us")),
             "spread_%": _f(r.get("spread_pct"), 1), "%error": _f(r.get("error_pct")),
             "met": "" if r.get("met") is None else ("yes" if r["met"] else "NO"),
             "%error_vs_null": _f(r.get("vs_null_error_pct"))} for r in rows if isinstance(r, dict)]


def cmd_verify(args):
    try:
        pred = json.loads(Path(args.prediction).read_text())
    except FileNotFoundError:
        raise UserError(f"{args.prediction}: no such file (rpcscope whatif --out writes one)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{args.prediction}: not a prediction file ({e})") from None
    if not isinstance(pred, dict) or pred.get("format") != M.PREDICTION_FORMAT:
        raise UserError(f"{args.prediction}: not a prediction file of format {M.PREDICTION_FORMAT} "
                        f"(rpcscope whatif --out writes one)")
    want = prediction_link(pred, args.prediction)
    rows, link = verify_rows(pred, args.run, want)
    if not any(r["measured_us"] for r in rows):
        raise UserError(f"{args.run}: no {pred['transport']} {pred['proc']} case at the predicted sizes")
    notes = []
    if (link.get("rate_bit") or None) != (want.rate_bps and int(want.rate_bps)) or \
            int(link.get("mtu") or 1500) != want.mtu:
        notes.append(f"the capture's link (rate {link.get('rate') or 'none'}, MTU {link.get('mtu')}) is not the "
                     f"prediction's ({want.describe()})")
    doc = {"format": VERIFY_FORMAT, "prediction": str(args.prediction), "run": str(args.run),
           "transport": pred["transport"], "proc": pred["proc"], "link": pred["link"],
           "link_described": want.describe(), "model_source": pred.get("model_source"), "rows": rows, "notes": notes}
    written = RunDir(args.run).verify_json(pred["transport"])
    try:
        written.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        raise UserError(f"{written}: cannot write the verification ({e})") from None
    if args.json:
        emit_json(doc)
        return 0
    print(f"prediction: {args.prediction} ({pred['transport']} {pred['proc']}, {pred['link_described']})")
    print(f"capture:    {args.run}\n")
    vs_null = any(r["vs_null_error_pct"] is not None for r in rows)
    table(verify_table_rows(rows), VERIFY_COLUMNS if vs_null else VERIFY_COLUMNS[:-1])
    print("% error = (measured - predicted) x 100 / measured; goal within 5 %")
    if vs_null:
        print("%error_vs_null: the same with each side over its own null call (size 0, one small packet at any MTU): "
              "what is left once the host's speed between the two captures is taken out")
    for n in notes:
        print(f"note: {n}")
    print(f"\nwritten: {written} (`rpcscope report {args.run}` shows it)")
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "model", help="fit the RTT model's unit costs and predict the RTT at sizes it never saw",
        description="Fit a few unit costs (per call, send, packet, receive, wake-up, acknowledgement, and per byte "
                    "marshalled, copied in and copied out) to the "
                    "measured round-trip path of the fitted sizes, lay each call out with them and the protocol's "
                    "arithmetic, and set the calculated RTT beside Measured and two baselines, as the DCE study's "
                    "Table 2 did.",
        epilog=MODEL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", nargs="?", metavar="RUN", help="a run directory with analysis/rtp.json")
    ap.add_argument("--transport", choices=("udp", "tcp"),
                    help="transport to model (default udp; a target run's: each it has)")
    ap.add_argument("--proc", help="procedure, when the run has several")
    ap.add_argument("--fit", metavar="SIZES", help="sizes to fit (default: every captured size but the held-out ones)")
    ap.add_argument("--holdout", metavar="SIZES", help="captured sizes to predict, not fit (default: the capture's "
                    "--holdout; '' for none)")
    ap.add_argument("--predict", metavar="SIZES", help="more sizes to calculate (no measurement)")
    ap.add_argument("--paper", metavar="NAME", choices=("dce",), help="the DCE study's Table 2 instead of a run")
    ap.add_argument("--out", metavar="FILE", help="model file (default RUN/analysis/model-TRANSPORT.json)")
    ap.add_argument("--json", action="store_true", help="print the model file's contents as JSON")
    ap.set_defaults(func=cmd_model)

    wp = subparsers.add_parser(
        "whatif", help="predict a model's RTT on another link (rate, MTU) and at other sizes",
        description="Lay the model's calls out again on another link: its unit costs stay, the counts follow the "
                    "protocol's arithmetic for the new MTU, and the wire follows from the frames' bits over the "
                    "rate.", epilog=WHATIF_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    wp.add_argument("model", help="a model file written by `rpcscope model`")
    wp.add_argument("--link-rate", metavar="RATE", help="link rate, e.g. 10mbit, 100mbit, 1gbit, none")
    wp.add_argument("--link", choices=N.LINK_KINDS, help="kind of link (default tbf with a rate: the testbed's shaper)")
    wp.add_argument("--mtu", type=int, metavar="BYTES", help="MTU (default the model's)")
    wp.add_argument("--latency-us", type=float, metavar="US", help="fixed one-way latency (default the model's)")
    wp.add_argument("--predict", metavar="SIZES", help="sizes (default the model's)")
    wp.add_argument("--out", metavar="FILE", help="write the prediction for `rpcscope verify`")
    wp.add_argument("--json", action="store_true", help="print the prediction as JSON")
    wp.set_defaults(func=cmd_whatif)

    vp = subparsers.add_parser(
        "verify", help="set a prediction (rpcscope whatif --out) beside a capture's measurement",
        epilog=VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    vp.add_argument("prediction", help="a prediction file written by `rpcscope whatif --out`")
    vp.add_argument("run", metavar="RUN", help="a run directory captured on the predicted link")
    vp.add_argument("--json", action="store_true", help="print the table as JSON")
    vp.set_defaults(func=cmd_verify)
    return ap
