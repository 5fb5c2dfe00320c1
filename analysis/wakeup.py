"""The unit costs of a wake-up, from the capture's wake-up calibration (rpc-wakecal, rpc/wakecal.h;
manifest.json "wake_calibration"), written to analysis/steps.json "wake_costs" beside each case's
other-path counts (analysis/run.py other_path_counts).

rpc-wakecal times a datagram from its send to the return of a reader on another CPU, per offset of
the send against the reader's heading for its wait: a reader that never sleeps (the busy row), one
woken from its sleep by a CPU found polling idle, and one whose wake-up lands while it is still leaving
its CPU and goes by an inter-processor interrupt (RES/CAL). Over the points where the reader slept at
every iteration (sleeps >= FULL_SLEEP), the mean time is a line in the interrupts per wake-up:
intercept = the polling wake-up, slope = one interrupt's cost. A sleep's cost is that intercept less
the busy reader's time: what a wait that blocks adds over one that finds its datagram come.

    wake_costs(points, after) -> {"busy_us", "wake_us", "sleep_us", "ipi_us", "after_ipi_us", ...} or None

after_ipi_us is what the wake-up right after an interrupt-borne one costs beyond another:
rpc-wakecal's "after_interrupt" run alternates a race offset with a calm one, and the calm iterations
behind a race iteration that took the interrupt are set against the sweep's point at that offset, where
every wake-up came behind another calm one (after_interrupt_us). On this VM 0.7-1.0 us,
and only the next wake-up pays it (the one after that is back to the sweep's). In the RPC it shows as the
call after an interrupted call: TCP 4016's second mode in the faster level, +1.8-2.0 us over the first,
its client's send (which carries the server's wake-up) and its wait for the reply ~0.9 us longer each.

wake_us is the intercept (a wake-up without interrupt) where the points' interrupts spread; where every
wake-up came by interrupt (a CPU left to halt when idle, capture --idle default) or none did, it is
their median time and sleep_us holds whatever each wake-up cost.

Measured on this VM (2 vCPUs, idle polling held): busy 2.9-3.5 us, wake_us 6.2, sleep_us 2.8, ipi_us
11.8-12.1 (rms about the line 0.08-0.14 us), either direction; the race window ~1.5 us wide, 1-2.5 us
before the reader's mark.
"""
import numpy as np

FULL_SLEEP = 0.95        # the reader slept at (almost) every iteration of the point
# Points with interrupts per wake-up spread at least this far are needed for the interrupt's slope; a
# calibration whose wake-ups never raced the sleeper's going (its race window missed by every offset)
# has no interrupt cost.
MIN_IPI_SPREAD = 0.3
# The after-interrupt cost needs this many calm iterations behind raced ones (and the text shows those
# behind race iterations that did not race where there are this many).
MIN_AFTER = 50


def after_interrupt_us(after):
    """(us, how it was measured) the wake-up after an interrupt-borne one costs beyond another, from
    rpc-wakecal's "after_interrupt" object: the p50 of the calm wake-ups behind a raced one less the
    sweep's point at that offset (every wake-up there behind another calm one). (None, why) where it did
    not run, has too few iterations, or came out at no cost.

    Why the sweep's point and not the pairs behind a race iteration that did not race (the run's own
    control, kept in the text): a race iteration that does not race is not a calm one. In one capture
    the server CPU's race offset raced 371 of 500 pairs; the 128 calm wake-ups behind the others had a
    p50 of 8.45 us against 4.67 in the sweep (some of those race iterations had slept and been woken
    late, some had not slept), which would put the cost at -2.95 us."""
    if not after:
        return None, "not measured (an older capture, or no offset of the sweep raced the sleeper)"
    try:
        raced, calm = int(after["after_raced"]), int(after["after_calm"])
        if raced < MIN_AFTER:
            return None, f"{raced} wake-ups behind an interrupt: fewer than {MIN_AFTER}"
        cost = (after["after_raced_p50_ns"] - after["plain_p50_ns"]) / 1000.0
        calm_us = (after["after_calm_p50_ns"] - after["plain_p50_ns"]) / 1000.0
        control = (f"; behind a race iteration that took none: {calm_us:+.2f} us"
                   if calm >= MIN_AFTER else "")
        if cost <= 0:
            return None, f"came out at {cost:+.2f} us, no cost a wake-up pays{control}"
        return cost, f"against the sweep's point at {after['offset_ns']} ns{control}"
    except (KeyError, TypeError, ValueError) as e:
        return None, f"malformed after_interrupt ({e})"


def wake_costs(points, after=None):
    """The unit costs from one rpc-wakecal run's points ({"offset_ns", "busy", "mean_ns", "sleeps", "ipis"})
    and its "after_interrupt" object, or None where the run has no busy row or no point that slept.
    ipi_us is None where no point's wake-ups raced the sleeper (see MIN_IPI_SPREAD) or the interrupts
    could not be counted; after_ipi_us is None where after_interrupt_us says so (after_ipi_source says what
    it was set against, or why there is none)."""
    busy = [p for p in points if p.get("busy")]
    slept = [p for p in points if not p.get("busy") and p.get("sleeps", 0) >= FULL_SLEEP]
    if not busy or not slept:
        return None
    b = float(busy[0]["mean_ns"]) / 1000.0
    x = np.array([p.get("ipis", -1) for p in slept], float)
    y = np.array([p["mean_ns"] for p in slept], float) / 1000.0
    out = {"busy_us": round(b, 3), "slept_points": len(slept), "ipi_us": None, "raced_points": 0}
    counted = x >= 0
    if counted.all() and x.max() - x.min() >= MIN_IPI_SPREAD:
        slope, intercept = np.polyfit(x, y, 1)
        out.update(wake_us=round(float(intercept), 3), ipi_us=round(float(slope), 3),
                   raced_points=int((x >= MIN_IPI_SPREAD).sum()),
                   fit_rms_us=round(float(np.sqrt(np.mean((y - (intercept + slope * x)) ** 2))), 3))
    else:
        calm = y[x < MIN_IPI_SPREAD] if counted.any() else y
        out["wake_us"] = round(float(np.median(calm if len(calm) else y)), 3)
    out["sleep_us"] = round(out["wake_us"] - b, 3)
    cost, why = after_interrupt_us(after)
    out["after_ipi_us"] = None if cost is None else round(cost, 3)
    out["after_ipi_source"] = why
    return out


def run_wake_costs(manifest):
    """{role: wake_costs} for the roles whose CPU the capture's wake-up calibration woke ("client",
    "server"); {} where the capture has none (older captures, or rpc-wakecal failed: its error is kept
    in the manifest)."""
    cal = (manifest or {}).get("wake_calibration") or {}
    out = {}
    for role in ("client", "server"):
        r = cal.get(role) or {}
        costs = wake_costs(r.get("points") or [], r.get("after_interrupt"))
        if costs and r.get("after_interrupt_error"):
            costs["after_ipi_source"] = f"not measured: {r['after_interrupt_error']}"
        if costs:
            out[role] = costs
    return out
