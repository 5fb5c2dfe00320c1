"""The one CLI: `rpcscope --help` and every subcommand's --help work and show examples."""
import io
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rpcscope.cli import COMMAND_MODULES, build_parser
from rpcscope.output import ReaderGoneSafe
from rpcscope.pipeline import link_options


def _choices(ap, dest):
    return list(next(a for a in ap._actions if a.dest == dest).choices)


def _subcommands():
    return sorted(_choices(build_parser(), "command"))


def _benchmarks():
    return _choices(_choices_parser("bench"), "benchmark")


def _choices_parser(command):
    return next(a for a in build_parser()._actions if a.dest == "command").choices[command]


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


def test_help_lists_the_pipeline_in_the_order_a_run_goes_through_it():
    assert _choices(build_parser(), "command") == [
        "testbed", "deploy", "capture", "analyze", "rtp", "model", "whatif", "verify", "report", "export", "run",
        "crosscheck", "experiment", "bench", "stubs"]


@pytest.mark.parametrize("name", _benchmarks())
def test_every_benchmark_is_under_bench_with_help_and_examples(name):
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "bench", name, "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"usage: rpcscope bench {name} "), r.stdout + r.stderr
    assert f"rpcscope bench {name}" in r.stdout.split("example", 1)[-1], f"rpcscope bench {name} --help"


def test_bench_names_the_benchmark_in_its_errors(tmp_path):
    assert _benchmarks() == ["null", "capture", "event-cost", "analysis", "layout", "interleave"]
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "bench"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "null" in r.stdout and "interleave" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "bench", "analysis", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("rpcscope bench analysis: ") and "Traceback" not in r.stderr, \
        r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["model", "--help"], ["whatif", "--help"], ["verify", "--help"]])
def test_a_reader_that_goes_away_is_no_error(argv):
    """`rpcscope model --help | head`: the reader of the output closes its end early. The command ends
    as it would have (exit 0), with no BrokenPipeError traceback."""
    p = subprocess.Popen([sys.executable, "-m", "rpcscope.cli"] + argv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()                        # gone before the first line is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0, err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


def test_output_goes_on_after_its_reader_has_gone():
    """ReaderGoneSafe: the write that meets the closed pipe and every later one succeed (dropped), so
    what follows a print, such as a clean-up, still runs; the descriptor then leads to /dev/null."""
    r, w = os.pipe()
    os.close(r)
    out = ReaderGoneSafe(io.TextIOWrapper(os.fdopen(w, "wb", buffering=0), line_buffering=True))
    assert out.write("first line\n") == len("first line\n")
    assert out.reader_gone
    print("second line", file=out, flush=True)
    assert os.readlink(f"/proc/self/fd/{out.fileno()}") == os.devnull
    out.close()


@pytest.mark.parametrize("args, words", [
    (["--max-seconds", "60"], "--max-seconds 60: give more than"),
    (["--max-seconds", "-5"], "--max-seconds -5"),
    (["--extra-sweep-seconds", "-1"], "--extra-sweep-seconds -1"),
    (["--transport", "sctp"], "--transport 'sctp'"),
    (["--kernel", "perf"], "--kernel perf: its recorder cannot be switched off"),      # --turns on, the default
])
def test_run_refuses_bad_options_before_the_testbed_comes_up(args, words, tmp_path):
    """`rpcscope run`'s own checks, which come before anything is started: exit 2, the option named,
    and no run directory."""
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "run", *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert not out.exists()


def test_a_run_naming_one_link_option_takes_the_defaults_for_the_others():
    # A testbed up at MTU 9000 and 100 Mbit/s: a run that names nothing keeps its link; one that names
    # --link-rate alone gets the default MTU and no loss, not the old testbed's.
    state = {"link": {"rate_bit": 100_000_000, "mtu": 9000, "loss_percent": 1.0}}
    none = SimpleNamespace(link_rate=None, mtu=None, loss=None)
    assert link_options(none, state) == ["--link-rate", "100mbit", "--mtu", "9000", "--loss", "1"]
    assert link_options(SimpleNamespace(link_rate="10mbit", mtu=None, loss=None), state) == ["--link-rate", "10mbit"]
    assert link_options(SimpleNamespace(link_rate=None, mtu=1500, loss=None), state) == ["--mtu", "1500"]
    assert link_options(none, None) == []
