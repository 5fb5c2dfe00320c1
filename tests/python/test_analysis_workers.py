"""The forked workers of `rpcscope analyze` (analysis/workers.py): a case stays with the worker that
first took it, errors come back with the worker's traceback, and no worker outlives the pool
however it ends. Real forked processes; the operations are small functions of this module."""
import os
import pathlib
import signal
import time
import types

import pytest

from rpcscope.analysis.workers import CaseWorkers, WorkerError, cpu_workers


def _children():
    """Live (not zombie) child processes of this one."""
    me, out = os.getpid(), []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _pid(run, k, arg):
    time.sleep(0.01 * (k % 3))          # uneven work, so that the workers finish out of order
    return os.getpid(), run.cases[k], arg


def _whoami(run, k, arg):
    return os.getpid()


def _fail(run, k, arg):
    raise ValueError(f"case {k} is malformed")


def _die(run, k, arg):
    os._exit(3)


def _slow(run, k, arg):
    time.sleep(30)


def _unpicklable(run, k, arg):
    return lambda: None


OPS = {"pid": _pid, "whoami": _whoami, "fail": _fail, "die": _die, "slow": _slow, "unpicklable": _unpicklable}
RUN = types.SimpleNamespace(cases=[f"case-{k}" for k in range(7)])


def test_cases_stay_with_the_worker_that_took_them():
    before = _children()
    with CaseWorkers(RUN, 2, OPS) as pool:
        first = dict(pool.map("pid", range(7), "a"))
        assert sorted(first) == list(range(7))
        assert {v[1] for v in first.values()} == set(RUN.cases) and {v[2] for v in first.values()} == {"a"}
        assert len({v[0] for v in first.values()}) == 2          # both workers took cases
        again = dict(pool.map("pid", reversed(range(7)), "b"))
        assert {k: v[0] for k, v in again.items()} == {k: v[0] for k, v in first.items()}
        assert sorted(pool.broadcast("whoami")) == sorted({v[0] for v in first.values()})
    assert _children() == before


def test_an_error_in_a_worker_is_raised_here_with_its_traceback_and_the_workers_stop():
    before = _children()
    with pytest.raises(ValueError, match=r"case \d is malformed") as err:
        with CaseWorkers(RUN, 2, OPS) as pool:
            list(pool.map("fail", range(3)))
    assert any("fail of case" in n and "in _fail" in n for n in err.value.__notes__), err.value.__notes__
    assert _children() == before


def test_a_result_that_cannot_be_sent_is_an_error_not_a_hang():
    with CaseWorkers(RUN, 2, OPS) as pool:
        with pytest.raises(WorkerError, match="unpicklable of case 0"):
            list(pool.map("unpicklable", [0]))
        assert dict(pool.map("pid", [1]))[1][1] == "case-1"     # the worker goes on


def test_a_worker_that_dies_is_named_and_nothing_is_left():
    before = _children()
    with pytest.raises(WorkerError, match=r"died during die of case 0 \(exit code 3\).*--workers 1"):
        with CaseWorkers(RUN, 2, OPS) as pool:
            list(pool.map("die", [0]))
    assert _children() == before


def test_an_interrupted_map_stops_the_workers_at_once():
    before = _children()
    signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    t0 = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            with CaseWorkers(RUN, 2, OPS) as pool:
                list(pool.map("slow", range(4)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert time.monotonic() - t0 < 10          # not the 30 s the operation would take
    assert _children() == before


def test_worker_count():
    assert cpu_workers(1) == 1 and cpu_workers(5, 3) == 3 and cpu_workers(2, 8) == 2
    assert cpu_workers(100) == min(100, len(os.sched_getaffinity(0)))
