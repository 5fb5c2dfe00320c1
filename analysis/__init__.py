"""rpcscope.analysis: see analysis/README.md."""
