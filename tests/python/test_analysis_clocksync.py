"""Convex-hull clock offset and drift (rpcscope.analysis.clocksync) on synthetic packets."""
import numpy as np
import pytest

from rpcscope.analysis.clocksync import estimate


def _packets(n, offset_ns, drift_ppm, seed=1, span_s=10.0, base=3_563_647_892_458, min_delay=5_000, mean_extra=20_000):
    """A's clock is the true time; B's reads (1 + drift) * t + offset. One-way delays
    are a minimum plus an exponential tail, as on a real link."""
    rng = np.random.default_rng(seed)
    b_of = lambda t: t * (1 + drift_ppm * 1e-6) + offset_ns  # noqa: E731
    t_ab = base + np.sort(rng.uniform(0, span_s * 1e9, n))
    d_ab = min_delay + rng.exponential(mean_extra, n)
    t_ba = base + np.sort(rng.uniform(0, span_s * 1e9, n))
    d_ba = min_delay + rng.exponential(mean_extra, n)
    a_to_b = (t_ab, b_of(t_ab + d_ab))
    b_to_a = (b_of(t_ba), t_ba + d_ba)
    return a_to_b, b_to_a, b_of


@pytest.mark.parametrize("offset_ns,drift_ppm,seed", [
    (0.0, 0.0, 1), (123_456_789.0, 8.0, 2), (-5_000_000_000.0, -40.0, 3), (2_500.0, 0.5, 4)])
def test_recovers_offset_and_drift(offset_ns, drift_ppm, seed):
    a_to_b, b_to_a, b_of = _packets(2000, offset_ns, drift_ppm, seed)
    r = estimate(a_to_b, b_to_a)
    assert r.quality in ("accurate", "approximate"), r.reason
    t = np.array([a_to_b[0][0], r.x0, a_to_b[0][-1]])
    err = r.from_reference(t) - b_of(t)
    assert np.all(np.abs(err) <= 2_000), err                # within 2 us over the span
    assert abs(r.drift_ppm - drift_ppm) <= 10, r.drift_ppm  # within 10 ppm
    assert r.slope_min <= 1 + drift_ppm * 1e-6 <= r.slope_max
    assert np.all(np.abs(err) <= r.accuracy_ns + 1e-3), (err, r.accuracy_ns)  # the bound holds
    # Back to A's clock.
    assert np.all(np.abs(r.to_reference(b_of(t)) - t) <= 2_000)


def test_one_kernel_is_zero_within_bound():
    a_to_b, b_to_a, _ = _packets(500, 0.0, 0.0, seed=7, min_delay=2_000, mean_extra=3_000)
    r = estimate(a_to_b, b_to_a)
    assert r.quality != "failed", r.reason
    assert abs(r.offset_ns) <= r.accuracy_ns
    assert r.slope_min <= 1.0 <= r.slope_max


def test_degenerate_inputs_fail_with_a_reason():
    a_to_b, b_to_a, _ = _packets(100, 1e6, 3.0)
    r = estimate()
    assert r.quality == "failed" and "no matched packets" in r.reason
    r = estimate(a_to_b=a_to_b)
    assert r.quality == "failed" and "one direction" in r.reason
    r = estimate(b_to_a=b_to_a)
    assert r.quality == "failed" and "one direction" in r.reason
    # Mismatched packets: replies stamped before the requests they answer.
    bad = (b_to_a[0] + 10e9, b_to_a[1])
    r = estimate(a_to_b, bad)
    assert r.quality == "failed" and "hulls cross" in r.reason
    r = estimate(a_to_b=(a_to_b[0][:3], a_to_b[1][:2]), b_to_a=b_to_a)
    assert r.quality == "failed"
    # All requests before all replies: nothing bounds the drift from above.
    r = estimate((a_to_b[0][:2], a_to_b[1][:2]), (b_to_a[0][-2:], b_to_a[1][-2:]))
    assert r.quality == "failed" and "do not bound" in r.reason


def test_few_pairs_are_approximate_not_wrong():
    b_of = lambda t: t * (1 + 3e-6) + 1e6  # noqa: E731
    t_ab, t_ba = np.array([0.0, 4e9, 8e9]) + 1e12, np.array([2e9, 6e9, 10e9]) + 1e12
    a_to_b, b_to_a = (t_ab, b_of(t_ab + 10_000)), (b_of(t_ba), t_ba + 10_000)
    r = estimate(a_to_b, b_to_a, accurate_ns=1.0)
    assert r.quality == "approximate" and r.reason
    t = np.array([r.x0])
    assert abs(r.from_reference(t) - b_of(t))[0] <= r.accuracy_ns + 1e-3
    d = r.as_dict()
    assert set(d) >= {"quality", "drift_ppm", "offset_ns", "accuracy_ns", "pairs"}
