"""Forked worker processes that each keep the cases they rebuilt, so that `rpcscope analyze` keeps
both of this machine's CPUs busy on its Python side too (steps.analyze).

A case's reconstruction (rpcs.reconstruct) is needed twice: first to walk a sample of its round-trip
paths for the in-situ probe calibration (probe.case_point), which needs every case before any case
can be charged, then to charge its probe costs and make its tables. A worker keeps the cases it
took in the first phase; the second phase sends each case back to the worker that holds it
(`owner`), so no case is rebuilt twice. Each worker decodes its own cases' traces (the native
extractor is a process of its own), so decoding and analysis share the CPUs without threads: the
workers are forked while no thread runs, and inherit the loaded run. They ignore SIGINT (the
parent, which gets it too, stops them) and exit when their pipe closes, so an interrupted analysis
leaves no process behind.

    with CaseWorkers(run, 2, {"rebuild": f, "set_probe": g, "tables": h}) as pool:
        for k, point in pool.map("rebuild", range(len(run.cases))): ...
        pool.broadcast("set_probe", calibration)
        for k, (rows, rtt, rpcs) in pool.map("tables", range(len(run.cases))): ...
"""
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import traceback


class WorkerError(RuntimeError):
    """A worker died, or its result could not be sent back (its exceptions are raised as they are)."""


class CaseWorkers:
    def __init__(self, run, n, ops):
        """run: the loaded Run the workers inherit; n: processes; ops: {name: function(run, k, arg)},
        called in a worker with a case index k (None for broadcast)."""
        self.run, self.ops = run, ops
        self.owner = {}                       # case index -> worker index that holds it
        self._procs, self._conns = [], []
        ctx = multiprocessing.get_context("fork")
        try:
            for _ in range(n):
                parent, child = ctx.Pipe()
                # The worker closes the parent's ends it inherits (its own and the earlier workers'):
                # else a pipe the parent closes would never read as closed in another worker.
                p = ctx.Process(target=_serve, args=(child, run, ops, [parent, *self._conns]), daemon=True,
                                name="rpcscope-analyze")
                p.start()
                child.close()
                self._procs.append(p)
                self._conns.append(parent)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(abort=exc_type is not None)

    def map(self, op, cases, arg=None):
        """Run op on every case index, yielding (k, result) as they finish. A case some worker already
        holds goes to that worker; the others to whichever worker is free, which then holds it."""
        todo = list(cases)
        busy = {}                             # worker index -> case index
        while todo or busy:
            for w in range(len(self._conns)):
                if w in busy:
                    continue
                k = next((k for k in todo if self.owner.get(k, w) == w), None)
                if k is None:
                    continue
                todo.remove(k)
                self.owner[k] = w
                self._conns[w].send((op, k, arg))
                busy[w] = k
            if not busy:
                raise WorkerError(f"no worker can take cases {todo}")
            ready = multiprocessing.connection.wait([self._conns[w] for w in busy])
            for w in [w for w in busy if self._conns[w] in ready]:
                k = busy.pop(w)
                yield k, self._result(w, op, k)

    def broadcast(self, op, arg=None):
        """Run op once in every worker (k = None); their results, in worker order."""
        for c in self._conns:
            c.send((op, None, arg))
        return [self._result(w, op, None) for w in range(len(self._conns))]

    def _result(self, w, op, k):
        try:
            ok, value = self._conns[w].recv()
        except EOFError:
            self._procs[w].join(timeout=5)
            code = self._procs[w].exitcode
            raise WorkerError(f"analysis worker {w} (pid {self._procs[w].pid}) died during {op} of case "
                              f"{k} (exit code {code}); run again with --workers 1 to see it in one "
                              f"process") from None
        if not ok:
            # The worker's exception itself, so that the caller handles it as it would in one process
            # (a RunError becomes a clear message), with the worker's traceback as a note.
            exc, text = value
            where = f"analysis worker {w}, {op} of case {k}:\n{text}"
            if exc is None:
                raise WorkerError(where)
            exc.add_note(where)
            raise exc
        return value

    def close(self, abort=False):
        """Stop the workers: each exits when its pipe closes, after the case it is on; abort (an error
        or an interrupt in the parent): at once."""
        for c in self._conns:
            if not abort:
                try:
                    c.send(None)
                except OSError:
                    pass
            c.close()
        for p in self._procs:
            if abort:
                p.terminate()
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        self._procs, self._conns = [], []


def _serve(conn, run, ops, inherited):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for c in inherited:
        c.close()
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            op, k, arg = msg
            try:
                reply = (True, ops[op](run, k, arg))
            except Exception as e:      # noqa: BLE001 - raised again in the parent, with this traceback
                reply = (False, (e, traceback.format_exc()))
            try:
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError):     # a result that cannot be sent
                conn.send((False, (None, traceback.format_exc())))
    except OSError:
        return              # the parent closed the pipe (it stopped, or was interrupted): nothing to tell
    finally:
        conn.close()


def cpu_workers(n_cases, requested=None):
    """Workers for n_cases: requested, else one per CPU this process may run on, at most n_cases."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(requested or cpus, n_cases))
