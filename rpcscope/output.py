"""Shared output helpers for CLI commands: a human table or JSON, and clear errors."""
import json
import os
import sys


class UserError(Exception):
    """An error the user can fix; the CLI prints it without a traceback and exits 2."""


def table(rows, columns, out=None):
    """Print rows (dicts) as an aligned text table with the given column keys."""
    out = out or sys.stdout  # resolved per call: sys.stdout may be replaced after import
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(row, widths)), file=out)


def emit_json(obj, out=None):
    out = out or sys.stdout
    json.dump(obj, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _numeric(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


class ReaderGoneSafe:
    """Standard output that, once the reader of its pipe has gone (`rpcscope goals runs/* | head`),
    drops what is written instead of raising BrokenPipeError: the command goes on to its end, and its
    clean-up (a capture's sessions and processes, `rpcscope run` taking the testbed down) is not cut
    short by a print on the way. From then on file descriptor 1 is /dev/null, for this process and the
    programs it starts."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_gone = False

    def write(self, text):
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self):
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self):
        self.reader_gone = True
        try:
            target = self._stream.fileno()
        except (OSError, ValueError):               # a stream with no descriptor: dropping is enough
            return
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, target)                     # what the stream still buffers goes there at exit
        finally:
            os.close(fd)

    def __getattr__(self, name):
        return getattr(self._stream, name)
