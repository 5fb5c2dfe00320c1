"""Sleeps per call, the untraced run's path shape against the traced one's (collectors/capture.py
sleeps_per_call, analysis/run.py path_shape); no testbed needed: the counts are read from files."""
import json

from rpcscope.analysis.run import path_shape
from rpcscope.collectors.capture import sleeps_per_call


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
    from rpcscope.collectors.capture import ipi_counts, ipi_delta
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
    """runs/run-20261127-001500, UDP 0: the traced run's CPUs got 0.24 and 0.21 IPIs a call, the untraced
    run's none, the sleeps alike. They landed on the traced path (its typical S2, the server's wake-up,
    5.3 us against 2.7-2.8 elsewhere), so the traced run took another path; the other-path rows count
    nothing for it (the median untraced call has no interrupt to add), and sleeps count either way."""
    from rpcscope.analysis.model import median_call_count
    from rpcscope.analysis.run import other_path_counts
    meta = {"sleeps_per_call": {"untraced": {"client": 1.0, "server": 1.0, "client_ipi": 0.0, "server_ipi": 0.0},
                                "traced": {"client": 0.999, "server": 1.026, "client_ipi": 0.237, "server_ipi": 0.206}}}
    assert path_shape(meta)["same"] is False
    got = other_path_counts(meta)
    assert got["client_ipis"] == -0.237 and median_call_count(got["client_ipis"]) == 0
    meta["sleeps_per_call"]["traced"].update(client_ipi=0.1, server_ipi=0.1)       # the tracers' usual
    assert path_shape(meta)["same"] is True
    # a traced run that slept more than the untraced one: another path (its reader found no data queued)
    meta = {"sleeps_per_call": {"untraced": {"client": 2.0, "server": 2.0}, "traced": {"client": 2.0, "server": 2.9}}}
    assert path_shape(meta)["same"] is False
