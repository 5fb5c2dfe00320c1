"""Throughput against caller threads: `dce-throughput` (the DCE study's Table 1, seed 004) and
`firefly` (Firefly RPC's Table I and, with fewer processors, Tables X and XI, seed 003).

dce-throughput: null calls per second and 4016-byte sends with 1-10 client threads, the calls of a
run shared out among its threads as the paper's 1000 RPCs were; the first call against the later
ones; at one thread, the floor: sockperf's ping-pong with a 14-byte and a 4016-byte message beside
the reference RPC's null, fixedarg 4016, maxarg 4016 and echo 4016 (sockperf's server echoes the
whole message, as echo does); and the 4016-byte throughput against sockperf's at every thread count
(N threads: N sockperf ping-pong clients at once) and at each one's own best thread count.
Throughput is DCE Table 1's: the caller's data bytes per call x calls/s.

The 4016-byte send is DCE's: a fixed-size array of 4016 characters, one full PDU. The reference
RPC's fixedarg is that call (the array is the body, uncounted). The peers have no fixed arrays and
send maxarg's counted opaque; so does the reference RPC's maxarg 4016, shown beside: its 4-byte
count makes 4020 body bytes, two PDUs and a window acknowledgement over UDP.

firefly: Null(), MaxResult(1440) and MaxArg(1440) with 1-8 caller threads (Table I); then client and
server on two CPUs (each its own) against both on one CPU: one thread's Null() (Table X) and
MaxResult's throughput with 1-5 threads (Table XI). Placements alternate round by round, the servers
restarted on their CPU for each.
"""
import collections
import math
import statistics

from .tables import Spec, cell_text, fmt, paper, ratio, spread_pct, text_table


def per_thread(calls, threads):
    """Calls each thread makes so that a run makes about `calls` in all, as the papers' runs did."""
    return max(1, math.ceil(calls / threads))


def mbps(cell, size):
    v = cell.median("calls_per_s") if cell and cell.ok and not cell.na else None
    return v * size * 8 / 1e6 if v else None


def secs_per(cell, n):
    v = cell.median("calls_per_s") if cell and cell.ok and not cell.na else None
    return n / v if v else None


# ---------------------------------------------------------------- dce-throughput

DCE_SYSTEMS = [("rpcscope", "udp"), ("tirpc", "udp"), ("rpcscope", "tcp"), ("grpc", "tcp")]
DCE_SEND = 4016


def send_proc(system):
    """The procedure of a system's 4016-byte send: DCE's fixed array where the system has one."""
    return "fixedarg" if system == "rpcscope" else "maxarg"


# The 4016-byte throughput against its floor, over UDP at each thread count: (key, system, proc,
# argument size, bytes counted per call, what goes on the wire). The bytes counted are the caller's
# data, as DCE Table 1 counts them; sockperf's echo of the message is not counted.
FLOOR_4016 = (
    ("rpcscope fixedarg 4016", "rpcscope", "fixedarg", DCE_SEND, DCE_SEND,
     "DCE's call: a fixed array of 4016 characters, the whole body (no count), one full PDU (3 IP packets); "
     "one round trip; no result (an 80-byte reply PDU)"),
    ("rpcscope maxarg 4016", "rpcscope", "maxarg", DCE_SEND, DCE_SEND,
     "4016 argument bytes and their 4-byte count: 4020 body bytes in two PDUs (4016 + 4); the first asks for "
     "a window ack, so a call is two round trips; no result (an 80-byte reply PDU)"),
    ("sockperf 4016 B", "sockperf", "echo", DCE_SEND, DCE_SEND,
     "one 4016-byte datagram (3 IP packets) and its echo, 4016 bytes back (not counted); N threads: N sockperf "
     "pp processes at once"),
)
FLOOR_KEY = "sockperf 4016 B"


def dce_specs(threads):
    out = [Spec(s, t, proc, size, n) for n in threads for s, t in DCE_SYSTEMS
           for proc, size in (("null", 0), (send_proc(s), DCE_SEND))]
    out += [Spec(s, "udp", proc, size, n) for n in threads for _, s, proc, size, _, _ in FLOOR_4016]
    floor = [Spec("sockperf", "udp", "null", 0), Spec("sockperf", "udp", "echo", DCE_SEND),
             Spec("rpcscope", "udp", "null", 0), Spec("rpcscope", "udp", "fixedarg", DCE_SEND),
             Spec("rpcscope", "udp", "maxarg", DCE_SEND), Spec("rpcscope", "udp", "echo", DCE_SEND)]
    return out, floor


def dce_build(cells, threads):
    paper_rows, note = paper("dce_table1_threads.csv")
    by_n = {int(r["threads"]): r for r in paper_rows}
    rows = []
    for n in threads:
        row = {"threads": n, "today": {}, "paper": {}}
        for s, t in DCE_SYSTEMS:
            null, send = cells[Spec(s, t, "null", 0, n)], cells[Spec(s, t, send_proc(s), DCE_SEND, n)]
            row["today"][f"{s} {t}"] = {
                "null_seconds_per_1000": secs_per(null, 1000), "null_rpc_per_s": null.median("calls_per_s"),
                "null_rpc_per_s_spread_pct": null.spread("calls_per_s"),
                "send4016_seconds_per_1000": secs_per(send, 1000), "send4016_mbps": mbps(send, DCE_SEND),
                "send4016_spread_pct": send.spread("calls_per_s"), "null": null.as_json(), "send4016": send.as_json()}
        p = by_n.get(n)
        if p:
            row["paper"] = {k: float(v) for k, v in p.items() if k != "threads" and v}
        rows.append(row)
    first = {}
    for s, t in DCE_SYSTEMS:
        c = cells.get(Spec(s, t, "null", 0, threads[0]))
        if c and c.ok:
            first[f"{s} {t}"] = {"first_call_us": c.median("first_call_us"), "later_p50_us": c.median("p50_us"),
                                 "threads": threads[0]}
    floor = {}
    sp_null, sp_4016 = cells[Spec("sockperf", "udp", "null", 0)], cells[Spec("sockperf", "udp", "echo", DCE_SEND)]
    for key, spec, ref in (("rpcscope null / sockperf 14 B", Spec("rpcscope", "udp", "null", 0), sp_null),
                           ("rpcscope fixedarg 4016 / sockperf 4016 B",
                            Spec("rpcscope", "udp", "fixedarg", DCE_SEND), sp_4016),
                           ("rpcscope maxarg 4016 / sockperf 4016 B", Spec("rpcscope", "udp", "maxarg", DCE_SEND),
                            sp_4016),
                           ("rpcscope echo 4016 / sockperf 4016 B", Spec("rpcscope", "udp", "echo", DCE_SEND),
                            sp_4016)):
        med, spr = ratio(cells[spec], ref, "calls_per_s")
        floor[key] = {"calls_per_s_ratio": med, "spread_pct": spr,
                      "rpcscope_calls_per_s": cells[spec].median("calls_per_s"),
                      "sockperf_calls_per_s": ref.median("calls_per_s"),
                      "rpcscope_p50_us": cells[spec].median("p50_us"), "sockperf_p50_us": ref.median("p50_us")}
    return {"rows": rows, "first_call": first, "floor_udp_1_thread": floor,
            "throughput_4016": throughput_4016(cells, threads), "paper_source": note}


def _floor_spec(key, n):
    for k, s, proc, size, _, _ in FLOOR_4016:
        if k == key:
            return Spec(s, "udp", proc, size, n)
    raise KeyError(key)


def _counted(key):
    return next(b for k, _, _, _, b, _ in FLOOR_4016 if k == key)


def round_peaks(cells, key, threads):
    """Per round: (Mbit/s, threads) at the thread count where `key` ran fastest in that round; None
    for a round in which any of its thread counts did not run or did not check."""
    runs = [cells[_floor_spec(key, n)].runs for n in threads]
    out = []
    for r in range(max((len(x) for x in runs), default=0)):
        got = [(x[r].calls_per_s * _counted(key) * 8 / 1e6, n) for x, n in zip(runs, threads)
               if r < len(x) and x[r] is not None and x[r].ok]
        out.append(max(got) if len(got) == len(threads) else None)
    return out


def throughput_4016(cells, threads):
    """The reference RPC's 4016-byte throughput against sockperf's with the same message: at every
    thread count (ratios within each round), and each at its own best thread count (a round's peak
    against the same round's peak; the median over the rounds)."""
    rows = []
    for n in threads:
        row = {"threads": n, "mbps": {}, "mbps_spread_pct": {}, "ratio_to_sockperf": {}, "cells": {}}
        ref = cells[_floor_spec(FLOOR_KEY, n)]
        for key, *_ in FLOOR_4016:
            c = cells[_floor_spec(key, n)]
            row["mbps"][key] = mbps(c, _counted(key))
            row["mbps_spread_pct"][key] = c.spread("calls_per_s") if c.ok and not c.na else None
            row["cells"][key] = c.as_json()
            if key != FLOOR_KEY:
                med, spr = ratio(c, ref, "calls_per_s")
                row["ratio_to_sockperf"][key] = {
                    "median": med * _counted(key) / _counted(FLOOR_KEY) if med else None, "spread_pct": spr}
        rows.append(row)
    peaks = {key: round_peaks(cells, key, threads) for key, *_ in FLOOR_4016}
    peak = {}
    for key, *_ in FLOOR_4016:
        got = [p for p in peaks[key] if p]
        vals = [v for v, _ in got]
        peak[key] = {"mbps": statistics.median(vals) if vals else None, "spread_pct": spread_pct(vals),
                     "threads": collections.Counter(n for _, n in got).most_common(1)[0][0] if got else None,
                     "threads_by_round": [p[1] if p else None for p in peaks[key]]}
        if key != FLOOR_KEY:
            rs = [a[0] / b[0] for a, b in zip(peaks[key], peaks[FLOOR_KEY]) if a and b and b[0]]
            peak[key]["ratio_to_sockperf_peak"] = statistics.median(rs) if rs else None
            peak[key]["ratio_spread_pct"] = spread_pct(rs)
    return {"rows": rows, "peak": peak, "counted": {k: {"bytes_per_call": b, "wire": w}
                                                    for k, _, _, _, b, w in FLOOR_4016}}


def dce_render(result, cells, threads, say=print):
    tab = result["table"]
    say(f"DCE Table 1 (seed 004): about {result['calls']} calls a run shared among the threads; median of "
        f"{result['repeats']} rounds ± spread; {result['placement']}; reference RPC --wait {result['wait']}, "
        f"inline server")
    lines = []
    for row in tab["rows"]:
        n = row["threads"]
        d = {"threads": str(n)}
        for s, t in DCE_SYSTEMS:
            d[f"{s} {t} null/s"] = cell_text(cells[Spec(s, t, "null", 0, n)], "calls_per_s", 0)
            v = row["today"][f"{s} {t}"]["send4016_mbps"]
            d[f"{s} {t} 4016 Mbit/s"] = fmt(v, 0)
        p = row["paper"]
        d["paper null/s"] = fmt(p.get("null_rpc_per_s"), 0)
        d["paper 4016 Mbit/s"] = fmt(p.get("send4016_mbps"), 2)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
    say("paper: IBM RS/6000, AIX, 10 Mbit/s Ethernet, 1000 RPCs with N threads")
    say("4016 Mbit/s: calls/s x 4016 x 8 (the caller's data, as the paper counts it); the reference RPC sends "
        "DCE's fixed array of 4016 characters (fixedarg, one PDU), the peers a counted opaque (maxarg)")
    say("")
    say("First call against later calls (us; one thread):")
    text_table([{"system": k, "first call": fmt(v["first_call_us"]), "later p50": fmt(v["later_p50_us"]),
                 "first / later": fmt(v["first_call_us"] / v["later_p50_us"] if v["later_p50_us"] else None, 1)}
                for k, v in tab["first_call"].items()], ["system", "first call", "later p50", "first / later"], say=say)
    say("")
    say("The floor, one thread over UDP: calls/s against sockperf's ping-pong in the same rounds")
    say("fixedarg 4016 fills one PDU as sockperf's 4016-byte datagram does; maxarg 4016's argument and its "
        "4-byte count take two 4096-byte PDUs and a fragment acknowledgement")
    text_table([{"comparison": k, "rpcscope calls/s": fmt(v["rpcscope_calls_per_s"], 0),
                 "sockperf msgs/s": fmt(v["sockperf_calls_per_s"], 0), "ratio": fmt(v["calls_per_s_ratio"], 2),
                 "spread": fmt(v["spread_pct"], 0, "%")} for k, v in tab["floor_udp_1_thread"].items()],
               ["comparison", "rpcscope calls/s", "sockperf msgs/s", "ratio", "spread"], say=say)
    say("")
    tp = tab["throughput_4016"]
    say("4016-byte throughput against its floor over UDP, in the same rounds: Mbit/s = calls/s x the caller's "
        "data bytes x 8 (DCE Table 1's caller-to-server measure)")
    for key, *_ in FLOOR_4016:
        say(f"  {key}: {tp['counted'][key]['wire']}")
    cols = ["threads"] + [k for k, *_ in FLOOR_4016] + [f"{k} / sockperf" for k, *_ in FLOOR_4016 if k != FLOOR_KEY]
    lines = []
    for row in tp["rows"]:
        d = {"threads": str(row["threads"])}
        for key, *_ in FLOOR_4016:
            spr = row["mbps_spread_pct"][key]
            d[key] = fmt(row["mbps"][key], 0) + (f" ±{spr:.0f}%" if spr is not None and result["repeats"] > 1 else "")
            if key != FLOOR_KEY:
                d[f"{key} / sockperf"] = fmt(row["ratio_to_sockperf"][key]["median"], 2)
        lines.append(d)
    text_table(lines, cols, say=say)
    say("Each at its own best thread count (a round's best against the same round's best; median of the rounds):")
    pk = tp["peak"]
    text_table([{"system": k, "best threads": fmt(v["threads"], 0), "Mbit/s": fmt(v["mbps"], 0),
                 "spread": fmt(v["spread_pct"], 0, "%"),
                 "of sockperf's best": fmt(v.get("ratio_to_sockperf_peak"), 2) if k != FLOOR_KEY else "1",
                 "ratio spread": fmt(v.get("ratio_spread_pct"), 0, "%") if k != FLOOR_KEY else ""}
                for k, v in pk.items()],
               ["system", "best threads", "Mbit/s", "spread", "of sockperf's best", "ratio spread"], say=say)


# ---------------------------------------------------------------- firefly

FF_SYSTEMS = [("rpcscope", "udp"), ("tirpc", "udp"), ("grpc", "tcp")]
FF_SIZE = 1440
FF_PLACEMENT_SYSTEMS = [("rpcscope", "udp"), ("tirpc", "udp")]


def firefly_specs(threads, xi_threads):
    table1 = [Spec(s, t, proc, size, n) for n in threads for s, t in FF_SYSTEMS
              for proc, size in (("null", 0), ("maxresult", FF_SIZE), ("maxarg", FF_SIZE))]
    placement = ([Spec(s, t, "null", 0, 1) for s, t in FF_PLACEMENT_SYSTEMS] +
                 [Spec(s, t, "maxresult", FF_SIZE, n) for n in xi_threads for s, t in FF_PLACEMENT_SYSTEMS])
    return table1, placement


def firefly_build(cells_by_placement, threads, xi_threads):
    split, one = cells_by_placement["split"], cells_by_placement["one"]
    t1, note1 = paper("firefly_table1_threads.csv")
    t10, note10 = paper("firefly_table10_processors.csv")
    t11, note11 = paper("firefly_table11_processors.csv")
    p1 = {int(r["threads"]): r for r in t1}
    p11 = {int(r["threads"]): r for r in t11}
    rows = []
    for n in threads:
        row = {"threads": n, "today": {}, "paper": {k: float(v) for k, v in p1.get(n, {}).items()
                                                   if k != "threads" and v}}
        for s, t in FF_SYSTEMS:
            null = split[Spec(s, t, "null", 0, n)]
            mr, ma = split[Spec(s, t, "maxresult", FF_SIZE, n)], split[Spec(s, t, "maxarg", FF_SIZE, n)]
            row["today"][f"{s} {t}"] = {"null_seconds_per_10000": secs_per(null, 10000),
                                        "null_rpc_per_s": null.median("calls_per_s"),
                                        "maxresult_mbps": mbps(mr, FF_SIZE), "maxarg_mbps": mbps(ma, FF_SIZE),
                                        "null": null.as_json(), "maxresult": mr.as_json(), "maxarg": ma.as_json()}
        rows.append(row)
    t10_rows = []
    for s, t in FF_PLACEMENT_SYSTEMS:
        a, b = split[Spec(s, t, "null", 0, 1)], one[Spec(s, t, "null", 0, 1)]
        med, spr = ratio(b, a, "p50_us")
        t10_rows.append({"system": f"{s} {t}", "two_cpus_seconds_per_1000": secs_per(a, 1000),
                         "one_cpu_seconds_per_1000": secs_per(b, 1000), "one_over_two_p50": med,
                         "one_over_two_spread_pct": spr, "two_cpus": a.as_json(), "one_cpu": b.as_json()})
    t11_rows = []
    for n in xi_threads:
        d = {"threads": n, "today": {}, "paper": {k: float(v) for k, v in p11.get(n, {}).items()
                                                  if k != "threads" and v}}
        for s, t in FF_PLACEMENT_SYSTEMS:
            a, b = split[Spec(s, t, "maxresult", FF_SIZE, n)], one[Spec(s, t, "maxresult", FF_SIZE, n)]
            d["today"][f"{s} {t}"] = {"two_cpus_mbps": mbps(a, FF_SIZE), "one_cpu_mbps": mbps(b, FF_SIZE)}
        t11_rows.append(d)
    paper10 = [{k: float(v) for k, v in r.items()} for r in t10]
    return {"table1": rows, "table10": t10_rows, "table11": t11_rows, "paper_table10": paper10,
            "paper_source": {"table1": note1, "table10": note10, "table11": note11}}


def firefly_render(result, cells_by_placement, threads, xi_threads, say=print):
    tab, split = result["table"], cells_by_placement["split"]
    say(f"Firefly Table I (seed 003): about {result['calls']} calls a run shared among the caller threads; median "
        f"of {result['repeats']} rounds ± spread; {result['placement']}; reference RPC --wait {result['wait']}")
    lines = []
    for row in tab["table1"]:
        n = row["threads"]
        d = {"threads": str(n)}
        for s, t in FF_SYSTEMS:
            d[f"{s} null/s"] = cell_text(split[Spec(s, t, "null", 0, n)], "calls_per_s", 0)
            d[f"{s} MaxResult Mbit/s"] = fmt(row["today"][f"{s} {t}"]["maxresult_mbps"], 0)
            d[f"{s} MaxArg Mbit/s"] = fmt(row["today"][f"{s} {t}"]["maxarg_mbps"], 0)
        d["paper null/s"] = fmt(row["paper"].get("null_rpc_per_s"), 0)
        d["paper MaxResult Mbit/s"] = fmt(row["paper"].get("maxresult_mbps"), 2)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
    say("(rpcscope and tirpc over UDP, grpc over TCP; paper: 5-processor MicroVAX II Fireflies, 10 Mbit/s Ethernet)")
    say("")
    say("Table X: one thread's Null(), seconds for 1000 calls, client and server on two CPUs against one")
    text_table([{"system": r["system"], "two CPUs": fmt(r["two_cpus_seconds_per_1000"], 3),
                 "one CPU": fmt(r["one_cpu_seconds_per_1000"], 3),
                 "one / two (p50, same rounds)": fmt(r["one_over_two_p50"], 2)} for r in tab["table10"]],
               ["system", "two CPUs", "one CPU", "one / two (p50, same rounds)"], say=say)
    p = {(int(r["caller_processors"]), int(r["server_processors"])): r["seconds_per_1000"]
         for r in tab["paper_table10"]}
    say(f"paper: 5/5 processors {p.get((5, 5))} s, 1/5 {p.get((1, 5))} s, 1/1 {p.get((1, 1))} s "
        f"(1/1 over 5/5: {p[(1, 1)] / p[(5, 5)]:.2f})" if (5, 5) in p and (1, 1) in p else "")
    say("")
    say("Table XI: MaxResult(1440) throughput in Mbit/s, client and server on two CPUs against one")
    lines = []
    for r in tab["table11"]:
        d = {"threads": str(r["threads"])}
        for s, t in FF_PLACEMENT_SYSTEMS:
            d[f"{s} two CPUs"] = fmt(r["today"][f"{s} {t}"]["two_cpus_mbps"], 0)
            d[f"{s} one CPU"] = fmt(r["today"][f"{s} {t}"]["one_cpu_mbps"], 0)
        d["paper 5/5"] = fmt(r["paper"].get("mbps_5_5"), 1)
        d["paper 1/1"] = fmt(r["paper"].get("mbps_1_1"), 1)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
