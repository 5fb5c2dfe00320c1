"""rpcscope.reports: see reports/README.md (filled in by its issue)."""
