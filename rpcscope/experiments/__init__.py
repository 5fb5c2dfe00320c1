"""`rpcscope experiment NAME`: the seeds' comparison tables, reproduced on the local testbed with
today's RPC systems side by side (peers/), the paper's own figures beside them (peers/data/).

    systems.py      the systems (the reference RPC, libtirpc, gRPC C++, sockperf): their servers on
                    the testbed's server host, one client run on the client host, its checked result
    tables.py       repeats, medians and spreads, ratios, the paper's tables, text and JSON output
    netwise.py, courier.py, threads.py   the experiments
    cli.py          the command
"""
