"""Stopping a long command cleanly: SIGTERM taken as Ctrl-C, and cleanups that run to their end.

    with interruptible():               # SIGTERM and SIGINT raise KeyboardInterrupt in here
        try:
            work()
        finally:
            with uninterrupted():       # ... and are ignored while this cleans up
                cleanup()

Python's default for SIGTERM ends the process at once, without `finally` blocks: a `kill`, CI
cancelling a job, or make passing on the signal it got (GNU make sends its children SIGTERM when it is
stopped) would leave a capture's sessions or the testbed's hosts behind. SIGINT gets Python's
default handler too, since a background job of a script without job control inherits it ignored.
Signal handlers can only be set in the main thread, where the CLI runs.
"""
import contextlib
import signal


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def interruptible():
    """Within: SIGTERM and SIGINT raise KeyboardInterrupt (the handlers before are restored after)."""
    return _handlers(_raise_interrupt, signal.default_int_handler)


def uninterrupted():
    """Within: SIGTERM and SIGINT are ignored, so that a cleanup is not cut short by a second signal."""
    return _handlers(signal.SIG_IGN, signal.SIG_IGN)


@contextlib.contextmanager
def _handlers(on_term, on_int):
    old_term = signal.signal(signal.SIGTERM, on_term)
    old_int = signal.signal(signal.SIGINT, on_int)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
