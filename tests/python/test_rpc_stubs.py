"""The stub study's procedures served and called through the reference RPC
(stubs/rpc/stubcall.c, plugged in with procs_register): every compiled and
interpreted variant, both byte orders, both transports, with client and server
using different variants (all write the same bytes). The server returns a
checksum of the value it unmarshalled and its wire length; rpc-client checks
both against what it sent."""
import subprocess

import pytest

PROCS = ["chung.one_int", "chung.int_array", "chung.structure"]
COMPILED = ["inline-byte", "inline-item", "proc-byte", "proc-item", "block"]
VARIANTS = COMPILED + [f"interp-{v}" for v in COMPILED]


@pytest.mark.parametrize("server_variant", ["inline-item", "interp-proc-byte", "block"])
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_every_variant_round_trips(rpc_server, rpc_client, transport, server_variant):
    srv = rpc_server(transport="both", executors=2, extra=["--stub", server_variant])
    for proc in PROCS:
        for variant in VARIANTS:
            for wire in ("network", "native"):
                if variant.endswith("block") and wire == "network":
                    continue  # block copy cannot swap: the client refuses (tested below)
                run = rpc_client(srv, transport=transport, proc=proc, calls=20, warmup=1,
                                 extra=["--stub", variant, "--wire", wire])
                if server_variant == "block" and wire == "network":
                    # The server's block stubs cannot unmarshal network order: a clean reject.
                    assert run.returncode == 1 and "rejected" in run.stderr, run.describe()
                    continue
                run.assert_ok(20)


def test_block_copy_refuses_network_order(rpc_bin):
    cp = subprocess.run([str(rpc_bin("rpc-client")), "--proc", "chung.structure", "--stub", "block"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and "use --wire native" in cp.stderr, cp.stderr


@pytest.mark.parametrize("bad", [["--stub", "inline_item"], ["--stub", "interp-"], ["--proc", "chung.nothing"],
                                 ["--proc", "chung.one_int", "--size", "4"]])
def test_bad_stub_options(rpc_bin, bad):
    cp = subprocess.run([str(rpc_bin("rpc-client")), *bad], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and cp.stderr.strip() and "Traceback" not in cp.stderr, cp.stderr
