"""What the step catalog (tracepoints/steps.toml) says as data beyond the steps: roles, spans of user marks,
the kernel events' filters; the generator's checks refuse a catalog that breaks them, and the code takes
its rows, roles and filters from it."""
import copy
import pathlib
import tomllib

import pytest

from rpcscope.analysis import rpcs
from rpcscope.analysis.clocksync import USER_PACKET_MARKS
from rpcscope.collectors import lttng, perf
from rpcscope.tracepoints import (
    SPANS,
    SPLIT,
    full_only_events,
    kernel_filter,
    lttng_kernel_names,
    side_of,
    side_step,
    span_of,
    span_steps,
    split_of,
    with_role,
)
from rpcscope.tracepoints.gen_catalog import CatalogError, check

CATALOG = pathlib.Path(__file__).parents[2] / "tracepoints" / "steps.toml"
TRACE_START = pathlib.Path(__file__).parents[2] / "ansible" / "roles" / "capture" / "tasks" / "trace_start.yml"


@pytest.fixture()
def cat():
    with open(CATALOG, "rb") as f:
        return tomllib.load(f)


def test_the_committed_catalog_passes_its_checks(cat):
    check(cat, "steps.toml")


@pytest.mark.parametrize("break_it, words", [
    (lambda c: c["spans"]["C7-C9"].update(last="S10"), "must name client steps"),
    (lambda c: c["spans"]["C14-C17"]["last_if"].update(tcp_fast="C18"), "unknown last_if"),
    (lambda c: c["spans"]["C7-C9"].update(kind="call"), "one span of kind call"),
    (lambda c: c["spans"]["RTT"].update(server_cpu=["C4"]), "server_cpu must name server steps"),
    (lambda c: c["spans"]["S8-S10"].pop("name"), "needs a side, a name and a kind"),
    (lambda c: next(s for s in c["steps"] if s["id"] == "C13").update(role="wake"), "a second client step"),
    (lambda c: next(s for s in c["steps"] if s["id"] == "C13").update(role="sleeper"), "role must be one of"),
    (lambda c: c["kernel_events"]["sched_switch"].update(filter="prev_comm"), "filter must be one of"),
    (lambda c: c["kernel_events"]["sched_wakeup"].update(lean="no"), "lean true or false"),
    (lambda c: c.pop("net_rx_vector"), "net_rx_vector"),
])
def test_a_catalog_that_breaks_a_rule_is_refused(cat, break_it, words):
    bad = copy.deepcopy(cat)
    break_it(bad)
    with pytest.raises(CatalogError, match=words):
        check(bad, "steps.toml")


def test_the_rows_beside_the_steps_are_the_catalogs_split_parts_and_spans():
    assert set(rpcs.EXTRA_ROWS) == set(SPLIT) | set(SPANS)
    assert rpcs.ROW_ORDER[-1] == rpcs.CALL_ROW == span_of("call") == "RTT"
    assert (rpcs.CALL_BEGIN_MARK, rpcs.CALL_END_MARK) == ("c1_begin", "c21_end")
    client = rpcs.ROW_ORDER[:rpcs.ROW_ORDER.index("S1")]
    assert client[-4:] == ["C8'", "C8''", "C7-C9", "C14-C17"]
    assert rpcs.EXTRA_ROWS["S8-S10"][:2] == ("server", "S8") and rpcs.EXTRA_ROWS["C7-C9"][1] is None


def test_roles_spans_and_sides_read_from_the_catalog():
    assert [side_step("client", r) for r in ("send_in", "sendmsg", "send_out", "sleep", "select", "recv")] == \
        ["C7", "C8", "C9", "C14", "C17", "C18"]
    assert [side_step("server", r) for r in ("send_in", "sendmsg", "send_out", "sleep", "select", "recv")] == \
        ["S8", "S9", "S10", "S14", "S3", "S4"]
    assert with_role("tx_irq") == ["C12", "C13", "S13"]
    assert span_of("wait", "client") == "C14-C17"
    assert span_steps("C14-C17") == ("C14", "C17") and span_steps("C14-C17", {"recv_wait"}) == ("C14", "C18")
    assert split_of("C8") == ["C8'", "C8''"] and split_of("C7") == []
    assert [side_of(x) for x in ("C8", "S9''", "S8-S10", "network")] == ["client", "server", "server", None]
    assert USER_PACKET_MARKS == {"a_to_b": ("c7_begin", "s4_end"), "b_to_a": ("s8_begin", "c18_end")}
    with pytest.raises(KeyError, match="spans of kind 'wait' on the server side"):
        span_of("wait", "server")


def test_the_collectors_filters_and_lean_set_come_from_the_catalog():
    assert full_only_events() == perf.FULL_ONLY_EVENTS == ("net:net_dev_start_xmit", "sched:sched_wakeup")
    assert [kernel_filter(e) for e in ("sched:sched_switch", "sched:sched_waking", "net:net_dev_xmit",
                                       "irq:softirq_entry", "qdisc:qdisc_enqueue", "syscalls:sys_enter_sendto",
                                       "skb:skb_copy_datagram_iovec")] == \
        ["switch", "woken", "device", "net_rx", "none", "task", "task"]
    assert perf.event_filter("irq:softirq_raise") == "vec == 3"
    assert perf.event_filter("qdisc:qdisc_dequeue") is None
    assert perf.event_filter("net:netif_receive_skb", devices=("veth-a",)) == 'name == "veth-a"'
    cmds = lttng.lttng_kernel_commands("s", "/o", ["irq:softirq_entry", "sched:sched_wakeup"], [], [], ["rpc-x"])
    assert ["--filter=vec == 3"] == [a for c in cmds if "irq_softirq_entry" in c for a in c if "--filter" in a]
    assert any("sched_wakeup" in c and '--filter=comm == "rpc-x"' in c for c in cmds)


def test_the_capture_roles_lttng_kernel_events_are_spelled_as_the_catalog_spells_them():
    """LTTng's kernel tracer accepts a name it has no probe for and records nothing under it: every event
    the capture role enables by name on a host whose collector is LTTng is one the catalog gives an LTTng
    spelling (lttng-modules names netif_receive_skb net_if_receive_skb, and has no net_dev_start_xmit),
    and the packet events are there."""
    text = TRACE_START.read_text()
    named = set()
    for line in text.splitlines():
        if "lttng enable-event --kernel" in line and "--syscall" not in line:
            arg = line.split("--channel=rpcs_kernel", 1)[1].strip()
            if not arg.startswith("{{ capture_lttng_"):       # those two are the variables read below
                named |= set(arg.split()[0].split(","))
    for var in ("capture_lttng_net_events", "capture_lttng_wake_events"):
        value = text.split(f"{var}: ", 1)[1].splitlines()[0].strip().strip('"')
        named |= {n for n in value.replace("{{ ',sched_wakeup' if capture_kernel_events == 'full' else '' }}",
                                           ",sched_wakeup").split(",") if n}
    lttng_names = set(lttng_kernel_names().values())
    assert named and named <= lttng_names, named - lttng_names
    assert {lttng_kernel_names()["net:net_dev_xmit"], lttng_kernel_names()["net:netif_receive_skb"]} <= named
    assert lttng_kernel_names()["net:netif_receive_skb"] == "net_if_receive_skb"
    assert "net:net_dev_start_xmit" not in lttng_kernel_names()
