"""`rpcscope experiment netwise`: the Netwise / Sun / Apollo comparison (seed 002) with today's systems.

Per-call round-trip time of void, add, integer 100, integer 1000, string (15 + 18 characters
concatenated), opaque 4000 / 8000 / 16000 (a buffer and back, and an integer), over UDP and TCP for
the reference RPC and libtirpc (Sun RPC's descendant), TCP for gRPC; sockperf's ping-pong with a
message of the call's argument bytes is the floor. The paper's figures (ms, Sun 3/280, client and
server on one host, mean of 5 x 500 calls) stand beside today's (us, p50, median of the rounds).
"""
from ..output import UserError
from . import codesize
from .systems import TIRPC_UDP_MAX
from .tables import Spec, cell_text, fmt, paper, ratio, text_table

ROWS = [("void", "null", 0), ("add", "add", 0), ("integer 100", "sum", 100), ("integer 1000", "sum", 1000),
        ("string", "concat", 33), ("opaque 4000", "echo", 4000), ("opaque 8000", "echo", 8000),
        ("opaque 16000", "echo", 16000)]
COLUMNS = [("rpcscope", "udp"), ("tirpc", "udp"), ("sockperf", "udp"), ("rpcscope", "tcp"), ("tirpc", "tcp"),
           ("grpc", "tcp"), ("sockperf", "tcp")]
PAPER_COLUMNS = [("udp_sun", "Sun udp"), ("udp_netwise", "Netwise udp"), ("udp_apollo", "Apollo udp"),
                 ("tcp_sun", "Sun tcp"), ("tcp_netwise", "Netwise tcp")]
# Ratios a row reports: each system over the reference RPC on the same transport, in the same rounds.
RATIOS = [("tirpc", "udp"), ("sockperf", "udp"), ("tirpc", "tcp"), ("grpc", "tcp"), ("sockperf", "tcp")]


def select(text):
    """The rows --tests names (all if None); UserError naming the unknown ones."""
    if text is None:
        return ROWS
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = {r[0]: r for r in ROWS}
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UserError(f"--tests {text!r}: unknown {', '.join(bad) or 'nothing given'}; "
                        f"use some of {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(names)]


def specs(rows=ROWS):
    return [Spec(system, transport, proc, size) for _, proc, size in rows for system, transport in COLUMNS]


def build(cells, rows=ROWS):
    """The table (JSON-ready) from the sweep's cells."""
    paper_rows, note = paper("netwise_rtt.csv")
    by_test = {r["test"]: r for r in paper_rows}
    out = []
    for test, proc, size in rows:
        row = {"test": test, "proc": proc, "size": size, "today": {}, "ratios": {}, "paper_ms": {}}
        for system, transport in COLUMNS:
            row["today"][f"{system} {transport}"] = cells[Spec(system, transport, proc, size)].as_json()
        for system, transport in RATIOS:
            med, sp = ratio(cells[Spec(system, transport, proc, size)], cells[Spec("rpcscope", transport, proc, size)])
            row["ratios"][f"{system} {transport} / rpcscope {transport}"] = (
                {"median": med, "spread_pct": sp} if med is not None else None)
        p = by_test.get(test, {})
        for key, _ in PAPER_COLUMNS:
            v = p.get(key, "")
            row["paper_ms"][key] = float(v) if v else None
        sun_u, nw_u = row["paper_ms"]["udp_sun"], row["paper_ms"]["udp_netwise"]
        sun_t, nw_t = row["paper_ms"]["tcp_sun"], row["paper_ms"]["tcp_netwise"]
        row["paper_ratios"] = {"netwise udp / sun udp": nw_u / sun_u if nw_u and sun_u else None,
                               "netwise tcp / sun tcp": nw_t / sun_t if nw_t and sun_t else None}
        out.append(row)
    sizes, size_note = paper("netwise_code_size.csv")
    return {"rows": out, "paper_source": note, "code_size": codesize.measure(),
            "paper_code_size": {r["code"]: {k: int(v) if v else None for k, v in r.items() if k != "code"}
                                for r in sizes},
            "paper_code_size_source": size_note}


def render(result, cells, rows=ROWS, say=print):
    tab = result["table"]
    say(f"Netwise comparison (seed 002): per-call RTT p50 in us (median of {result['repeats']} rounds ± spread), "
        f"{result['calls']} calls a run; {result['placement']}; reference RPC waits with --wait {result['wait']}, "
        f"inline server")
    lines = []
    for row, (test, proc, size) in zip(tab["rows"], rows):
        d = {"test": test}
        for system, transport in COLUMNS:
            d[f"{system} {transport}"] = cell_text(cells[Spec(system, transport, proc, size)])
        lines.append(d)
    text_table(lines, ["test"] + [f"{s} {t}" for s, t in COLUMNS], say=say)
    say("")
    say("Ratios in the same rounds (median; 1.0 = the reference RPC on that transport), and the paper's own")
    lines = []
    for row in tab["rows"]:
        d = {"test": row["test"]}
        for k, v in row["ratios"].items():
            d[k.split(" / ")[0] + " /ref"] = fmt(v["median"], 2) if v else "-"
        for k, v in row["paper_ratios"].items():
            d["paper " + k.replace(" / ", "/")] = fmt(v, 2)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
    say("")
    say("The paper's RTT in ms (Sun 3/280, SunOS 3.5, client and server on one host, mean of 5 x 500 calls):")
    lines = [{"test": row["test"], **{label: fmt(row["paper_ms"][k], 2) for k, label in PAPER_COLUMNS}}
             for row in tab["rows"]]
    text_table(lines, ["test"] + [label for _, label in PAPER_COLUMNS], say=say)
    render_code_size(tab, say)
    say(f"n/a: libtirpc's UDP messages stop at 8800 bytes (opaque 16000 needs {16000 + 40}; the limit used is "
        f"{TIRPC_UDP_MAX} of argument), as the paper's Sun and Netwise have no UDP figure there; gRPC has no UDP. "
        f"sockperf: a message of the call's argument bytes (at least 14) and its echo, no procedure.")


def render_code_size(tab, say=print):
    say("")
    say("Code size, bytes (text + data): application / generated (stubs) / libraries (the RPC runtime, "
        "no C or C++ runtime)")
    lines = []
    for part in ("application", "generated", "libraries", "total"):
        d = {"code": part}
        for system in ("rpcscope", "tirpc", "grpc"):
            for side in ("client", "server"):
                d[f"{system} {side}"] = str(tab["code_size"][system][side][part])
        p = tab["paper_code_size"].get(part, {})
        d["paper Sun client"] = fmt(p.get("client_sun"), 0)
        d["paper Sun server"] = fmt(p.get("server_sun"), 0)
        d["paper Netwise client"] = fmt(p.get("client_netwise"), 0)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
    say("application: the programs' own objects with their benchmark harness (peerbench.c; rpc/bench.c); "
        "generated: rpcgen / protoc output, the reference RPC's hand-written stubs (rpc/procs.c); "
        "the paper's server init is in its application row here")
