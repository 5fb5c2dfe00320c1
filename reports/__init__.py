"""rpcscope.reports: the run's report (report.md, index.html), its figures and Perfetto exports."""
