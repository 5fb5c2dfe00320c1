"""`rpcscope stubs bench`: Chung et al.'s Tables 2-6 measured on this machine.

Runs the C driver (build/stubs/stubbench) for every procedure of
stubs/idl/chung.idl and calib.idl, every stub kind and variant; optionally
counts instructions per call under valgrind's callgrind; fits the cost model
(model.py) to the paper's three workloads; prints Table 2 with the estimate
beside each measurement, Tables 3 and 4, the cost equations of Table 5 and
the fitted parameters of Table 6 next to the MicroVAX-II values, and a
closing note on the paper's four conclusions.
"""
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import idl, model

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IDL_FILES = [os.path.join(HERE, "idl", "chung.idl"), os.path.join(HERE, "idl", "calib.idl")]
DRIVER = os.path.join(REPO, "build", "stubs", "stubbench")

WORKLOADS = [("one_int", "(I)"), ("int_array", "(A[256] I)"), ("structure", "(Structure)")]
ROWS = [("interpreted", "inline-byte"), ("interpreted", "inline-item"), ("interpreted", "proc-byte"),
        ("interpreted", "proc-item"), ("interpreted", "block"),
        ("compiled", "inline-byte"), ("compiled", "inline-item"), ("compiled", "proc-byte"),
        ("compiled", "proc-item"), ("compiled", "block")]
ROW_LABEL = {"inline-byte": "inline     byte copy", "inline-item": "inline     item copy",
             "proc-byte": "procedural byte copy", "proc-item": "procedural item copy",
             "block": "block copy"}
PAPER_COL = {"one_int": "i", "int_array": "a256", "structure": "structure"}
PAPER_VARIANT = {"inline-byte": ("inline", "byte"), "inline-item": ("inline", "item"),
                 "proc-byte": ("procedural", "byte"), "proc-item": ("procedural", "item"),
                 "block": ("block", "block")}
# Table 6 symbols as the paper's CSV names them.
PAPER_SYMBOL = {"L_b": "L_b", "L_i": "L_i", "f": "f", "p": "p", "alpha": "alpha", "B": "B", "A": "A", "e": "e"}


class BenchError(Exception):
    pass


def shared_tables_dir():
    """The seeds' tables beside the repository (../shared in CI), if present."""
    for d in (os.environ.get("RPCSCOPE_SHARED"), os.path.join(REPO, "..", "shared"), "/work/shared"):
        if d and os.path.isdir(os.path.join(d, "seeds", "tables")):
            return os.path.join(d, "seeds", "tables")
    return None


def _read_csv(name):
    d = shared_tables_dir()
    if not d or not os.path.exists(os.path.join(d, name)):
        return None
    with open(os.path.join(d, name), newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def paper_table2():
    """{(stub, variant, workload): (measured_ms, estimate_ms)} from the seed CSV, or {}."""
    rows = _read_csv("chung_table2_marshal_ms.csv") or []
    out = {}
    inv = {v: k for k, v in PAPER_VARIANT.items()}
    for r in rows:
        v = inv.get((r["movement"], r["copy"]))
        for w, col in PAPER_COL.items():
            try:
                out[(r["stub"], v, w)] = (float(r[f"{col}_ms"]), float(r[f"{col}_est"]))
            except (ValueError, KeyError):
                pass
    return out


def paper_table6():
    """{symbol: microseconds} from the seed CSV, or {}."""
    out = {}
    for r in _read_csv("chung_table6_parameters.csv") or []:
        try:
            out[r["symbol"]] = float(r["value_us"])
        except (ValueError, KeyError):
            pass
    return out


def procedures():
    out = {}
    for path in IDL_FILES:
        iface = idl.parse_file(path)
        for p in iface.procedures:
            out[(iface.name, p.name)] = p
    return out


# ---------------------------------------------------------------- running the driver

def run_driver(reps, batch_ns, cpu, progress=None):
    if not os.access(DRIVER, os.X_OK):
        raise BenchError(f"{os.path.relpath(DRIVER)} is missing: build it with `make stubs`")
    cmd = [DRIVER, "--reps", str(reps), "--batch-ns", str(batch_ns), "--progress"]
    if cpu is not None and cpu >= 0:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errs = []
    for line in proc.stderr:
        m = re.match(r"progress (\d+) (\d+)", line)
        if m and progress:
            progress(int(m.group(1)), int(m.group(2)))
        elif not m:
            errs.append(line.rstrip())
    out = proc.stdout.read()
    if proc.wait() != 0:
        raise BenchError(f"{' '.join(cmd)} failed: " + "; ".join(errs[-3:]))
    return json.loads(out)


def run_callgrind(calls=200):
    """Instructions per marshal call for every cell, from callgrind dumps, or None."""
    if not shutil.which("valgrind") or not os.access(DRIVER, os.X_OK):
        return None
    with tempfile.TemporaryDirectory(prefix="stubs-cg-") as tmp:
        base = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={base}", DRIVER, "--callgrind", str(calls)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None
        meta = json.loads(r.stdout)
        if not meta.get("running_on_valgrind"):
            return None  # built without valgrind/callgrind.h: no client requests
        per = {}
        for path in glob.glob(base + ".*"):
            label, total = None, None
            with open(path, errors="replace") as f:
                for line in f:
                    if line.startswith("desc: Trigger: Client Request: cell "):
                        label = int(line.rsplit(" ", 1)[1])
                    elif line.startswith(("totals:", "summary:")):
                        total = int(line.split()[1])
            if label is not None and total is not None:
                per[label] = total / calls
        return per


# ---------------------------------------------------------------- analysis

def analyse(data, instr=None):
    procs = procedures()
    cells = []
    for c in data["cells"]:
        p = procs.get((c["iface"], c["proc"]))
        if p is None:
            continue
        cnt = model.counts(p.args, c["stub"], c["variant"])
        cells.append(dict(c, counts=cnt, instructions=(instr or {}).get(c["index"])))
    fit_rows = [(c["counts"], c["median_ns"]) for c in cells if c["iface"] == "chung" and not c["extra"]]
    theta = model.fit(fit_rows, minimax=True)
    for c in cells:
        c["estimate_ns"] = model.estimate(c["counts"], theta)
        c["error_pct"] = (c["estimate_ns"] - c["median_ns"]) * 100.0 / c["median_ns"]
    return cells, theta


def _cell(cells, stub, variant, proc, extra=False):
    for c in cells:
        if c["iface"] == "chung" and c["proc"] == proc and c["stub"] == stub and c["variant"] == variant \
                and c["extra"] == extra:
            return c
    return None


def table3(cells):
    """Percent of marshalling time due to interpretation, from measurements:
    (interpreted - compiled) / interpreted, as the paper read it off Table 2."""
    out = {}
    for v in model.VARIANTS:
        for w, _ in WORKLOADS:
            i, c = _cell(cells, "interpreted", v, w), _cell(cells, "compiled", v, w)
            out[(v, w)] = max(0.0, (i["median_ns"] - c["median_ns"]) * 100.0 / i["median_ns"])
    return out


def table4(cells, theta):
    """Percent of marshalling time due to procedure calls: the model's
    p x (number of calls) + s_p, over the measured time (the paper's
    "sum of procedure call times / marshalling time")."""
    out = {}
    for stub in ("interpreted", "compiled"):
        for v in ("proc-byte", "proc-item"):
            for w, _ in WORKLOADS:
                c = _cell(cells, stub, v, w)
                calls = c["counts"]["p"] * theta["p"] + c["counts"]["s_p"] * theta["s_p"]
                out[(stub, v, w)] = calls * 100.0 / c["median_ns"]
    return out


def equation(cnt):
    """A cost equation like Table 5's, e.g. 's + 257 L_i + 256 f'."""
    terms = []
    for p in model.PARAMS:
        n = cnt[p]
        if not n:
            continue
        name = "b(n)" if p == "beta" else p
        if p == "beta":
            terms.append(f"b({n})")
        else:
            terms.append(name if n == 1 else f"{n} {name}")
    return " + ".join(terms)


def conclusions(cells):
    """The paper's four conclusions, each judged on this machine's numbers."""
    m = {(c["stub"], c["variant"], c["proc"], c["extra"]): c["median_ns"] for c in cells if c["iface"] == "chung"}

    def g(stub, v, w, extra=False):
        return m[(stub, v, w, extra)]

    t3 = table3(cells)
    share = {w: sorted(t3[(v, w)] for v in model.VARIANTS)[2] for w, _ in WORKLOADS}
    c1 = share["int_array"] < 20 and share["structure"] > 40
    absolute = g("interpreted", "inline-item", "one_int") - g("compiled", "inline-item", "one_int")
    out = [{
        "claim": "Compiled stubs have a significant advantage over interpreted ones only for large, irregular "
                 "parameters.",
        "holds": c1,
        "evidence": (f"median share of time due to interpretation: (I) {share['one_int']:.0f} %, "
                     f"(A[256] I) {share['int_array']:.0f} %, (Structure) {share['structure']:.0f} %; "
                     f"for (I) that is {absolute:.1f} ns in absolute terms"),
    }]
    ratios = []
    for stub in ("compiled", "interpreted"):
        for cp in ("byte", "item"):
            for w, _ in WORKLOADS:
                ratios.append(g(stub, f"proc-{cp}", w) / g(stub, f"inline-{cp}", w))
    ratios.sort()
    med = ratios[len(ratios) // 2]
    ci = [g("compiled", "proc-item", w) / g("compiled", "inline-item", w) for w, _ in WORKLOADS]
    out.append({
        "claim": "Inline data movement is about a factor of two faster than procedural, almost independently of "
                 "other choices.",
        "holds": med >= 1.8,
        "partly": 1.2 <= med < 1.8,
        "evidence": (f"procedural/inline time, median over 12 cells {med:.2f}x "
                     f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}); "
                     f"compiled item copy: (I) {ci[0]:.2f}x, (A[256] I) {ci[1]:.2f}x, (Structure) {ci[2]:.2f}x"),
    })
    bi = [g("compiled", "inline-byte", w) / g("compiled", "inline-item", w) for w, _ in WORKLOADS]
    sw = [g("compiled", "inline-item", w, True) / g("compiled", "inline-item", w) for w, _ in WORKLOADS]
    out.append({
        "claim": "Byte swapping is not particularly costly relative to single item copying.",
        "holds": max(bi) < 1.5,
        "partly": max(bi) >= 1.5 and max(sw) < 1.1,
        "evidence": (f"byte copy (network order) / item copy, compiled inline: (I) {bi[0]:.2f}x, "
                     f"(A[256] I) {bi[1]:.2f}x, "
                     f"(Structure) {bi[2]:.2f}x; but item copy with a bswap instruction / without: "
                     f"{sw[0]:.2f}x, {sw[1]:.2f}x, {sw[2]:.2f}x"),
    })
    bl = [g(stub, "inline-item", w) / g(stub, "block", w) for stub in ("compiled",) for w, _ in WORKLOADS[1:]]
    interp_block = g("interpreted", "inline-item", "structure") / g("interpreted", "block", "structure")
    out.append({
        "claim": "Block transfer, where possible, is much faster than single item copying.",
        "holds": min(bl) > 3,
        "evidence": (f"compiled inline item copy / block copy: (A[256] I) {bl[0]:.1f}x, (Structure) {bl[1]:.1f}x; "
                     f"interpreted (Structure) {interp_block:.1f}x "
                     f"(the interpreter cannot block-copy records)"),
    })
    return out


# ---------------------------------------------------------------- printing

def _fmt_ns(x):
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def report(cells, theta, meta, out=sys.stdout):
    paper2, paper6 = paper_table2(), paper_table6()
    w = out.write
    w(f"Marshalling without transport, ns per call: median of {meta['reps']} interleaved batches of >= "
      f"{meta['batch_ns'] / 1000:.0f} us, pinned to CPU {meta['cpu']}.\n")
    w("Byte copy is in network order (swapped: this host is little endian); item and block copy in native order.\n\n")

    w("Table 2: marshalling cost, measured (analytic estimate, error) [instructions per call]\n")
    hdr = f"{'stub':<12} {'variant':<21}" + "".join(f"  {label:>34}" for _, label in WORKLOADS)
    w(hdr + "\n" + "-" * len(hdr) + "\n")
    worst = 0.0
    for stub, v in ROWS:
        line = f"{stub:<12} {ROW_LABEL[v]:<21}"
        for wk, _ in WORKLOADS:
            c = _cell(cells, stub, v, wk)
            worst = max(worst, abs(c["error_pct"]))
            ins = f" [{c['instructions']:.0f}]" if c.get("instructions") else ""
            s = f"{_fmt_ns(c['median_ns'])} ({_fmt_ns(c['estimate_ns'])}, {c['error_pct']:+.1f}%){ins}"
            line += f"  {s:>34}"
        w(line + "\n")
    w(f"largest |estimate - measured| / measured: {worst:.1f} %\n")
    if paper2:
        w("\nThe paper's Table 2 (MicroVAX-II, ms: measured (estimate)) and this machine's speed-up per cell:\n")
        for stub, v in ROWS:
            line = f"{stub:<12} {ROW_LABEL[v]:<21}"
            for wk, _ in WORKLOADS:
                pv = paper2.get((stub, v, wk))
                c = _cell(cells, stub, v, wk)
                s = f"{pv[0]:g} ({pv[1]:g}) {pv[0] * 1e6 / c['median_ns']:.0f}x" if pv else "illegible"
                line += f"  {s:>34}"
            w(line + "\n")

    w("\nTable 3: percent of marshalling time due to interpretation, (interpreted - compiled) / interpreted\n")
    t3 = table3(cells)
    w(f"{'variant':<21}" + "".join(f"  {label:>12}" for _, label in WORKLOADS) + "\n")
    for v in model.VARIANTS:
        w(f"{ROW_LABEL[v]:<21}" + "".join(f"  {t3[(v, wk)]:>11.0f}%" for wk, _ in WORKLOADS) + "\n")

    w("\nTable 4: percent of marshalling time due to procedure calls, (p x calls + s_p) / measured\n")
    t4 = table4(cells, theta)
    w(f"{'stub':<12} {'variant':<21}" + "".join(f"  {label:>12}" for _, label in WORKLOADS) + "\n")
    for stub in ("interpreted", "compiled"):
        for v in ("proc-byte", "proc-item"):
            w(f"{stub:<12} {ROW_LABEL[v]:<21}" + "".join(f"  {t4[(stub, v, wk)]:>11.0f}%" for wk, _ in WORKLOADS)
              + "\n")

    w("\nTable 5: cost equations for (A[256] I), derived from the interface\n")
    for stub in ("compiled", "interpreted"):
        for v in model.VARIANTS:
            c = _cell(cells, stub, v, "int_array")
            w(f"{stub:<12} {ROW_LABEL[v]:<21}  {equation(c['counts'])}\n")

    w("\nTable 6: parameters fitted to this machine's Table 2 (ns) beside the MicroVAX-II's (us)\n")
    w("(the paper's blocks are all about 1 KiB, so alpha and beta trade off; their sum for 1 KiB is what the data "
      "fix)\n")
    w(f"{'symbol':<7} {'meaning':<52} {'here ns':>9} {'MicroVAX us':>12}\n")
    for p in model.PARAMS:
        val = theta[p]
        pv = paper6.get(PAPER_SYMBOL.get(p, ""), None)
        if p == "beta":
            pb = paper6.get("b(1024)")
            w(f"{'beta':<7} {model.PARAM_MEANING[p]:<52} {val:>9.4f} {'':>12}\n")
            w(f"{'b(1024)':<7} {'one 1024-byte block copy: alpha + 1024 beta':<52} {theta['alpha'] + 1024 * val:>9.2f} "
              f"{'' if pb is None else f'{pb:g}':>12}\n")
            continue
        w(f"{p:<7} {model.PARAM_MEANING[p]:<52} {val:>9.3f} {'' if pv is None else f'{pv:g}':>12}\n")

    cal = [c for c in cells if c["iface"] != "chung" and not c["extra"]]
    if cal:
        errs = sorted(abs(c["error_pct"]) for c in cal)
        w(f"\nOut of sample: the same parameters predict {len(cal)} cells of the calibration procedures "
          f"(stubs/idl/calib.idl) with median |error| {errs[len(errs) // 2]:.0f} %, worst {errs[-1]:.0f} %:\n")
        w("a linear per-operation model describes a pipelined, out-of-order CPU less well than a MicroVAX;\n"
          "the same operation costs more in straight-line code than in a loop, where calls and moves overlap.\n")

    w("\nConclusions of the paper, on this machine:\n")
    for k, c in enumerate(conclusions(cells), 1):
        verdict = "holds" if c["holds"] else ("partly holds" if c.get("partly") else "does not hold")
        w(f"{k}. {c['claim']}\n   -> {verdict}: {c['evidence']}\n")


def to_json(cells, theta, meta):
    return {
        "meta": {k: meta[k] for k in ("reps", "batch_ns", "cpu", "native_order")},
        "parameters_ns": theta,
        "b_1024_ns": theta["alpha"] + theta["beta"] * 1024,
        "paper_parameters_us": paper_table6(),
        "cells": [{k: c[k] for k in ("iface", "proc", "stub", "variant", "order", "extra", "bytes", "batch",
                                     "median_ns", "p10_ns", "p90_ns", "estimate_ns", "error_pct", "instructions",
                                     "counts")}
                  for c in cells],
        "table3_pct": {f"{v}/{w}": x for (v, w), x in table3(cells).items()},
        "table4_pct": {f"{s}/{v}/{w}": x for (s, v, w), x in table4(cells, theta).items()},
        "conclusions": conclusions(cells),
    }
