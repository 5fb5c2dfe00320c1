"""rpcscope.collectors: `rpcscope capture`, the kernel collectors and the run directory (collectors/README.md)."""
