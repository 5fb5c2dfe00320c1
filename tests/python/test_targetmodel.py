"""The target model (analysis/targetmodel.py) and its arithmetic (analysis/targetwire.py): hand-computed
messages and packets, the arithmetic against a recorded trace's stream bytes, a truth inside the model's
family recovered from noisy class times, predictions at sizes not fitted, and the runs it refuses."""
from __future__ import annotations

import pathlib
import random
import statistics

import pytest

from rpcscope.analysis import targetmodel as T, targetwire as W
from rpcscope.analysis.kernelonly import analyze_case

CASE = pathlib.Path(__file__).parent / "fixtures" / "target-case-tcp-0"
TRUTH = {"call": 2.0, "marshal": 0.0002, "send": 3.0, "copy_in": 0.0004, "packet": 2.5, "carry": 0.0003,
         "receive": 3.5, "copy_out": 0.0005, "wakeup": 4.0}
SIZES = (0, 500, 1392, 2800, 4016, 6000, 8000)


def test_onc_rpc_messages_by_hand():
    # echo of 1392 bytes: a 40-byte call header, the opaque's length and bytes; a 24-byte reply header
    ex = W.exchange("libtirpc", "udp", "echo", 1392)
    assert (ex.request_bytes, ex.reply_bytes) == (40 + 4 + 1392, 24 + 4 + 1392)
    assert ex.request_packets == (20 + 8 + 1436,)
    # 4016 bytes: 4060 + 8 UDP bytes cut into IP fragments of 1480
    assert W.exchange("libtirpc", "udp", "echo", 4016).request_packets == (1500, 1500, 20 + 4068 - 2 * 1480)
    # over TCP a 4-byte record mark each way; XDR pads the opaque to 4
    tcp = W.exchange("libtirpc", "tcp", "echo", 1393)
    assert (tcp.request_bytes, tcp.reply_bytes) == (4 + 40 + 4 + 1396, 4 + 24 + 4 + 1396)
    assert W.exchange("libtirpc", "tcp", "maxarg", 100).reply_bytes == 4 + 24


def test_grpc_messages_by_hand():
    # a bytes field of 1392: tag, 2-byte varint, the bytes; the 5-byte gRPC prefix; one DATA frame header
    ex = W.exchange("grpc", "tcp", "echo", 1392, header_bytes=(44, 35))
    assert ex.request_bytes == 44 + 9 + 5 + 1 + 2 + 1392 and ex.reply_bytes == 35 + 9 + 5 + 1 + 2 + 1392
    # proto3 leaves the empty field out; a 20000-byte message takes two DATA frames
    assert W.stream_bytes("grpc", "tcp", "echo", 0) == (14, 14)
    assert W.stream_bytes("grpc", "tcp", "echo", 20000)[0] == 2 * 9 + 5 + 1 + 3 + 20000
    with pytest.raises(W.WireError, match="TCP only"):
        W.stream_bytes("grpc", "udp", "echo", 0)
    with pytest.raises(W.WireError, match="values sent"):
        W.bodies("grpc", "add", 0)


def test_the_arithmetic_matches_a_recorded_trace():
    """The recorded reference case (TCP, maxarg, 0 bytes): the bytes each call's sends and receives moved."""
    res = analyze_case(CASE)
    ex = W.exchange("reference", "tcp", "maxarg", 0)
    assert statistics.median(c.request for c in res.calls) == ex.request_bytes
    assert statistics.median(c.reply for c in res.calls) == ex.reply_bytes


def _cases(target, transport, truth, noise, sizes=SIZES, edges=False, seed=1):
    rnd = random.Random(seed)
    out = {}
    for z in sizes:
        ex = W.exchange(target, transport, "echo", z)
        cls = {c: sum(truth[u] * n for u, n in counts.items()) * (1 + rnd.uniform(-noise, noise))
               for c, counts in T.class_counts(ex, edges).items()}
        out[z] = {"program_p50_us": sum(cls.values()) * 1.05,
                  "model_input": {"class_us": cls, "path_us": sum(cls.values()), "typical_calls": 100,
                                  "corrected": False, "edges": edges, "stream_bytes_p50": None}}
    return out


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_a_truth_in_the_family_is_recovered(transport):
    m = T.build("libtirpc", transport, "echo", _cases("libtirpc", transport, TRUTH, 0.002))
    got = {p["name"]: p["value"] for p in m.params}
    for u in ("call", "send", "packet", "receive", "wakeup"):
        assert got[u] == pytest.approx(TRUTH[u], rel=0.01), (u, got[u])
    assert all(abs(r.error_pct) < 1 for r in m.rows)
    assert all(p["fitted"] for p in m.params) and len(m.params) <= 10


def test_sizes_left_out_are_predicted_with_the_baselines_beside():
    cases = _cases("libtirpc", "udp", TRUTH, 0.0)
    m = T.build("libtirpc", "udp", "echo", cases, fit_sizes=[0, 1392, 4016, 8000], predict=[12000])
    rows = {r.size: r for r in m.rows}
    assert rows[2800].kind == rows[6000].kind == "predicted" and rows[12000].kind == "calculated"
    assert abs(rows[2800].error_pct) < 0.5 and abs(rows[6000].error_pct) < 0.5
    assert rows[12000].measured_us is None and rows[12000].model_us > rows[8000].model_us
    # each fitted size is also predicted by a fit without it, and so are the baselines
    assert all(rows[z].cv_us is not None and rows[z].interp_error_pct is not None for z in (0, 1392, 4016, 8000))
    s = m.summary()
    assert s["predicted_sizes"] == 3 and s["cv_sizes"] == 4      # 500, 2800, 6000
    # the structure a line through bytes and packets misses: the last IP fragment's size
    assert s["predicted_mean_abs_error_pct"]["model"] <= s["predicted_mean_abs_error_pct"]["line"]


def test_runs_the_model_cannot_take():
    with pytest.raises(T.TargetModelError, match="3 sizes or more"):
        T.build("libtirpc", "udp", "echo", _cases("libtirpc", "udp", TRUTH, 0.0, sizes=(0, 4016)))
    mixed = _cases("libtirpc", "udp", TRUTH, 0.0)
    mixed[0]["model_input"]["edges"] = True
    with pytest.raises(T.TargetModelError, match="capture them in one run"):
        T.build("libtirpc", "udp", "echo", mixed)
    with pytest.raises(T.TargetModelError, match="more than one PDU"):
        T.build("reference", "udp", "echo", _cases("libtirpc", "udp", TRUTH, 0.0))
    with pytest.raises(T.TargetModelError, match="stream bytes"):
        T.build("grpc", "tcp", "echo", _cases("grpc", "tcp", TRUTH, 0.0))
