"""rpcscope.testbed: two hosts on one machine, network namespaces or QEMU guests on a bridge, reached over
SSH like real machines (`rpcscope testbed up | down | status`; testbed/README.md).

Other packages use what a testbed that is up recorded (load_state), what is wrong with it (health), the
tests' hold on it (held_by_tests), what of it still exists (remains) and its Ansible inventory (INVENTORY).
"""
from .config import INVENTORY
from .lock import held_by_tests
from .state import health, load_state, remains

__all__ = ["INVENTORY", "health", "held_by_tests", "load_state", "remains"]
