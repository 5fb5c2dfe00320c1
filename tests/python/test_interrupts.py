"""rpcscope/interrupts.py: SIGTERM taken as Ctrl-C, and cleanups no signal cuts short."""
import os
import signal

import pytest

from rpcscope.interrupts import interruptible, uninterrupted


def test_sigterm_interrupts_and_a_cleanup_runs_to_its_end():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    cleaned = False
    with pytest.raises(KeyboardInterrupt):
        with interruptible():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            finally:
                with uninterrupted():
                    os.kill(os.getpid(), signal.SIGTERM)      # a second signal: ignored
                    os.kill(os.getpid(), signal.SIGINT)
                    cleaned = True
    assert cleaned
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
