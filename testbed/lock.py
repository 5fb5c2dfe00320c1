"""One `testbed up` or `down` at a time on this machine, and none from outside a test run that holds the
testbed."""
import contextlib
import fcntl
import os
import pathlib
import time

from rpcscope.output import UserError

LOCK_PATH = pathlib.Path(os.environ.get("RPCSCOPE_TESTBED_LOCK", "/run/rpcscope-testbed.lock"))
LOCK_WAIT = 300           # seconds `up`/`down` wait for another one to finish
# The tests that drive the testbed hold this lock for as long as they use it, and mark their own
# `rpcscope` commands with TEST_OWNER_ENV; an `up` or `down` from anywhere else would pull the hosts
# from under the test, and is refused.
TEST_LOCK_PATH = pathlib.Path("/run/lock/rpcscope-testbed-test.lock")
TEST_OWNER_ENV = "RPCSCOPE_TESTBED_TEST"


@contextlib.contextmanager
def held_by_tests(wait=1200):
    """The integration tests' hold on the testbed: TEST_LOCK_PATH locked (one test module at a time
    on this machine) and TEST_OWNER_ENV set for the commands they run meanwhile."""
    before = os.environ.get(TEST_OWNER_ENV)
    with exclusive(wait=wait, remove_after=True, path=TEST_LOCK_PATH):
        os.environ[TEST_OWNER_ENV] = "1"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(TEST_OWNER_ENV, None)
            else:
                os.environ[TEST_OWNER_ENV] = before


def refuse_while_a_test_holds_it(action):
    """UserError when a test run holds the testbed (TEST_LOCK_PATH) and this command is not its own."""
    if os.environ.get(TEST_OWNER_ENV):
        return
    try:
        fd = os.open(TEST_LOCK_PATH, os.O_RDONLY)
    except OSError:
        return                                  # no test lock: no test running
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(f"a test run is using the testbed (it holds {TEST_LOCK_PATH}); `rpcscope testbed "
                        f"{action}` now would pull its hosts from under it. Wait for the test run to "
                        f"finish, then try again") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(wait=LOCK_WAIT, remove_after=False, path=None):
    """One `up` or `down` at a time on this machine (they share names and the state directory).

    `down` removes the lock file when it is done (leaving nothing behind); a
    waiter that then holds a lock on the removed file notices and locks anew.
    """
    path = pathlib.Path(path or LOCK_PATH)
    deadline = time.monotonic() + wait
    while True:
        f = open(path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            if time.monotonic() > deadline:
                raise UserError(f"another `rpcscope testbed` command has held {path} for {wait}s; "
                                f"wait for it to finish and try again") from None
            time.sleep(0.2)
            continue
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    try:
        yield
    finally:
        if remove_after:
            path.unlink(missing_ok=True)
        f.close()
