"""The one CLI: `rpcscope --help` and every subcommand's --help work and show examples."""
import subprocess
import sys

import pytest

from rpcscope.cli import COMMAND_MODULES, build_parser


def _subcommands():
    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "command")
    return sorted(sub.choices)


def test_top_level_help_lists_every_command():
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for name in _subcommands():
        assert name in r.stdout
    assert len(_subcommands()) >= len(COMMAND_MODULES)


@pytest.mark.parametrize("command", _subcommands())
def test_every_command_has_help_with_examples(command):
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", command, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "example" in r.stdout.lower(), f"rpcscope {command} --help has no examples"
