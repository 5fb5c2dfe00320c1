"""Sleeps per call, the untraced run's path shape against the traced one's (collectors/capture.py
sleeps_per_call, analysis/run.py path_shape); no testbed needed: the counts are read from files."""
import json
import pathlib

from rpcscope.analysis.run import histogram_modes, modes_label, other_path_counts, path_shape, untraced_modes
from rpcscope.collectors.capture import ipi_counts, ipi_delta, sleeps_per_call


def _res(voluntary, calls=1000):
    return {"calls": calls, "switches": {"voluntary": voluntary, "involuntary": 3}}


def test_sleeps_per_call_from_the_client_result_and_the_server_statistics(tmp_path):
    st = tmp_path / "server-untraced-0-stats.json"
    st.write_text(json.dumps({"requests": 1200, "voluntary_switches": 3600, "involuntary_switches": 2}))
    assert sleeps_per_call(_res(1996), st) == {"client": 1.996, "server": 3.0}


def test_sleeps_per_call_is_none_without_the_counts(tmp_path):
    st = tmp_path / "stats.json"
    st.write_text(json.dumps({"requests": 1200}))                     # a server that predates the counts
    assert sleeps_per_call(_res(1996), st) is None
    assert sleeps_per_call({"calls": 1000}, st) is None                # a client that predates them
    assert sleeps_per_call(_res(1996), tmp_path / "missing.json") is None
    st.write_text("{\"requests\": 12")                                   # cut short
    assert sleeps_per_call(_res(1996), st) is None
    st.write_text(json.dumps({"requests": 0, "voluntary_switches": 5}))  # served nothing
    assert sleeps_per_call(_res(1996), st) is None


def test_a_run_that_slept_in_other_waits_took_another_path():
    same = {"sleeps_per_call": {"untraced": {"client": 1.998, "server": 2.0},
                                "traced": {"client": 2.0, "server": 2.03}}}
    assert path_shape(same) == {"untraced": "2.00/2.00", "traced": "2.00/2.03", "same": True}
    other = {"sleeps_per_call": {"untraced": {"client": 1.996, "server": 2.98},
                                 "traced": {"client": 2.0, "server": 2.0}}}
    assert path_shape(other)["same"] is False
    assert path_shape({}) is None and path_shape({"sleeps_per_call": {"untraced": None, "traced": None}}) is None


INTERRUPTS = """            CPU0       CPU1
   1:          9          0   IO-APIC   1-edge      i8042
 NMI:          0          0   Non-maskable interrupts
 RES:     643870     792434   Rescheduling interrupts
 CAL:    1089411    1643148   Function call interrupts
 TLB:      55969      43075   TLB shootdowns
"""


def test_ipis_per_cpu_from_proc_interrupts(tmp_path):
    f = tmp_path / "interrupts"
    f.write_text(INTERRUPTS)
    before = ipi_counts(f)
    assert before == {0: 643870 + 1089411, 1: 792434 + 1643148}
    f.write_text(INTERRUPTS.replace("1643148", "1647048").replace("643870 ", "643880 "))
    after = ipi_counts(f)
    assert ipi_delta(before, after, {"client": 0, "server": 1}) == {"client": 10, "server": 3900}
    assert ipi_delta(before, after, {"client": 0, "server": 0}) is None     # whose would they be
    assert ipi_delta({}, after, {"client": 0, "server": 1}) is None
    assert ipi_delta(before, after, {"client": 0, "server": 7}) is None     # no such CPU
    assert ipi_counts(tmp_path / "missing") == {}


def test_a_run_woken_by_interrupts_took_another_path(tmp_path):
    st = tmp_path / "stats.json"
    st.write_text(json.dumps({"requests": 5200, "voluntary_switches": 15540, "involuntary_switches": 2}))
    got = sleeps_per_call(_res(9990, calls=5000), st, {"client": 5, "server": 3900}, 5200)
    assert got == {"client": 1.998, "server": 2.988, "client_ipi": 0.001, "server_ipi": 0.75}
    # Same sleeps, but the untraced server's wake-ups came by interrupt: another path all the same.
    meta = {"sleeps_per_call": {"untraced": {"client": 2.0, "server": 2.0, "client_ipi": 0.0, "server_ipi": 0.8},
                                "traced": {"client": 2.0, "server": 2.03, "client_ipi": 0.0, "server_ipi": 0.0}}}
    shape = path_shape(meta)
    assert shape["same"] is False and shape["untraced_ipi"] == "0.00/0.80" and shape["traced_ipi"] == "0.00/0.00"
    # A capture that counted IPIs in one run only is judged on the sleeps.
    del meta["sleeps_per_call"]["traced"]["server_ipi"]
    assert path_shape(meta)["same"] is True and "untraced_ipi" not in path_shape(meta)


def test_interrupts_only_the_traced_run_took_are_another_path_too():
    """A captured UDP 0 case: the traced run's CPUs got 0.24 and 0.21 IPIs a call, the untraced
    run's none, the sleeps alike. They landed on the traced path (its typical S2, the server's wake-up,
    5.3 us against 2.7-2.8 elsewhere), so the traced run took another path, and sleeps count either way."""
    meta = {"sleeps_per_call": {"untraced": {"client": 1.0, "server": 1.0, "client_ipi": 0.0, "server_ipi": 0.0},
                                "traced": {"client": 0.999, "server": 1.026, "client_ipi": 0.237, "server_ipi": 0.206}}}
    assert path_shape(meta)["same"] is False
    got = other_path_counts(meta)
    assert got["client_ipis"] == -0.237
    meta["sleeps_per_call"]["traced"].update(client_ipi=0.1, server_ipi=0.1)       # the tracers' usual
    assert path_shape(meta)["same"] is True
    # a traced run that slept more than the untraced one: another path (its reader found no data queued)
    meta = {"sleeps_per_call": {"untraced": {"client": 2.0, "server": 2.0}, "traced": {"client": 2.0, "server": 2.9}}}
    assert path_shape(meta)["same"] is False


FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def _hist(counts, from_ns=20000, bin_ns=100, above=0):
    return {"bin_ns": bin_ns, "from_ns": from_ns, "counts": counts, "above": above}


def test_modes_of_a_real_three_mode_untraced_run():
    """TCP 4016 in the faster level: the reply's wake-up raced the client's switch-out in 38 % of the
    calls (+10.5 us), and another 39 % took 2 us more than the fastest; the p50 is in the
    second mode, which is why the traced path's RTT, the first mode's, missed it by 13 %."""
    res = json.loads((FIXTURES / "client-untraced-tcp-4016-three-modes.json").read_text())
    got = histogram_modes(res["rtt_hist"], res["rtt_ns"]["p50"])
    assert [round(m["peak_us"]) for m in got["modes"]] == [15, 16, 25]
    assert [round(m["share"], 2) for m in got["modes"]] == [0.17, 0.39, 0.38]
    assert got["p50_mode"] == 1
    assert modes_label(got) == "14.7 us 17 %, 16.5 us 39 % (p50), 25.3 us 38 %"


def test_one_broad_mode_stays_one_and_a_few_stragglers_are_no_mode():
    counts = [0] * 300
    for i in range(40, 120):                  # 24-32 us, a hump of 5000 calls
        counts[i] = 40 + (40 - abs(i - 80))
    counts[250] = 60                          # 60 calls at 45 us: 1 %, under MODE_MIN_SHARE
    total = sum(counts)
    got = histogram_modes(_hist(counts, above=5), p50_ns=28000)
    assert len(got["modes"]) == 1 and got["p50_mode"] == 0
    assert got["modes"][0]["from_us"] == 24.0 and got["modes"][0]["to_us"] == 32.0
    assert got["modes"][0]["share"] == round((total - 60) / (total + 5), 3)


def test_a_p50_between_two_modes_says_so():
    counts = [0] * 120
    counts[10], counts[100] = 500, 500        # two modes of half the calls each, 9 us apart
    got = histogram_modes(_hist(counts), p50_ns=25000)
    assert len(got["modes"]) == 2 and got["p50_mode"] is None
    assert modes_label(got).endswith("(p50 between)")


def test_no_histogram_no_modes(tmp_path):
    assert histogram_modes(None) is None and histogram_modes(_hist([])) is None
    assert histogram_modes(_hist([0, 0, 0]), p50_ns=1) == {"modes": [], "p50_mode": None}   # no calls
    for bad in ({"counts": [1, 2]}, _hist([1, "2"]), _hist([1, -2]), dict(_hist([1]), bin_ns=0), _hist("12")):
        assert histogram_modes(bad) is None, bad                   # not the shape rpc-client writes
    case = {"id": "udp-maxarg-0", "dir": "cases/udp-maxarg-0"}
    assert untraced_modes(tmp_path, case) is None                  # no file
    (tmp_path / "cases/udp-maxarg-0").mkdir(parents=True)
    (tmp_path / "cases/udp-maxarg-0/client-untraced.json").write_text(json.dumps({"rtt_ns": {"p50": 1}}))
    assert untraced_modes(tmp_path, case) is None                  # a client before its histogram
    assert modes_label(None) == ""
