"""rpcscope.collectors: see collectors/README.md (filled in by its issue)."""
