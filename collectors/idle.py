"""The CPU idle policy of a capture: what an idle CPU does while it waits for the next packet.

On this VM a reply that must wake a halted vCPU costs ~40 us more than one that
finds it running (the host must re-enter the guest), and the spread of those
wake-ups swamps every other step. The standard knob is the PM QoS request
/dev/cpu_dma_latency (Documentation/power/pm_qos_interface.rst): while a
process holds it open with the value 0, cpuidle picks only states with zero
exit latency, i.e. the polling loop, on every CPU. tuned's latency-performance
profile and cyclictest use the same request.

    --idle poll   hold /dev/cpu_dma_latency = 0 for the whole capture (default):
                  waiting CPUs spin instead of halting, as on a machine with deep
                  C-states off; the wake-up steps C16 and S2 then cost a few us.
    --idle os     leave the OS's choice (halt when idle), and record it.

Either way the manifest records the policy, the cpuidle driver and its states.
The request ends when its file is closed, so nothing outlives the capture,
whatever way it ends.
"""
import os
import pathlib
import struct

from rpcscope.output import UserError

PM_QOS_DEV = "/dev/cpu_dma_latency"
CPUIDLE = pathlib.Path("/sys/devices/system/cpu/cpuidle")
CPU0_STATES = pathlib.Path("/sys/devices/system/cpu/cpu0/cpuidle")
POLICIES = ("poll", "os")


def _read(path):
    try:
        return pathlib.Path(path).read_text().strip()
    except OSError:
        return None


def describe():
    """The cpuidle driver and CPU 0's idle states (name, exit latency in us, disabled)."""
    states = []
    for d in sorted(CPU0_STATES.glob("state*"), key=lambda p: int(p.name[5:])):
        lat = _read(d / "latency")
        states.append({"name": _read(d / "name"), "latency_us": int(lat) if lat and lat.isdigit() else None,
                       "disabled": _read(d / "disable") == "1"})
    return {"cpuidle_driver": _read(CPUIDLE / "current_driver"),
            "cpuidle_governor": _read(CPUIDLE / "current_governor_ro") or _read(CPUIDLE / "current_governor"),
            "states": states}


class IdlePolicy:
    """Context manager: applies the policy on entry, ends it on exit (closing the PM QoS request)."""

    def __init__(self, policy):
        if policy not in POLICIES:
            raise UserError(f"--idle {policy!r}: use poll or os")
        self.policy = policy
        self.fd = None

    def check(self):
        """Before anything starts: can the policy be applied here?"""
        if self.policy == "poll" and not os.access(PM_QOS_DEV, os.W_OK):
            raise UserError(f"--idle poll needs to write {PM_QOS_DEV} (the PM QoS CPU latency request), which "
                            f"{'does not exist' if not os.path.exists(PM_QOS_DEV) else 'is not writable'} here; "
                            f"run as root, or use --idle os (and expect ~40 us wake-ups of halted CPUs)")

    def __enter__(self):
        if self.policy == "poll":
            try:
                self.fd = os.open(PM_QOS_DEV, os.O_WRONLY | os.O_CLOEXEC)
                os.write(self.fd, struct.pack("=i", 0))
            except OSError as e:
                self.close()
                raise UserError(f"open/write {PM_QOS_DEV}: {e.strerror}; run as root or use --idle os") from None
        return self

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc):
        self.close()
        return False

    def record(self):
        out = {"policy": self.policy, **describe()}
        out["mechanism"] = (f"{PM_QOS_DEV} held at 0 us for the capture: idle CPUs poll"
                            if self.policy == "poll" else "none: the cpuidle governor chooses (CPUs halt when idle)")
        return out
