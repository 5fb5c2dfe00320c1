"""rpcscope: where does the time go in a remote procedure call, step by step, on today's Linux?"""
import pathlib

__version__ = "0.1.0"

# The source tree: rpcscope is installed editable from it, and finds the RPC
# binaries, the Ansible playbooks and the step catalog there.
ROOT = pathlib.Path(__file__).resolve().parent.parent
