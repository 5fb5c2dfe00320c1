"""rpcscope.stubs: Chung et al.'s stub design alternatives - an interface
compiler, compiled and interpreted stubs in C, and the marshalling cost model."""
