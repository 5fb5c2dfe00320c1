"""rpcscope.analysis: see analysis/README.md (filled in by its issue)."""
