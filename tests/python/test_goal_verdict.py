"""`rpcscope run`'s (and the report's) verdict on the model's goals: it says when the run's own measurement moved more
than the goals it is judged by (no testbed needed: the verdict reads the model's error rows)."""
import pytest

from rpcscope.analysis.model import goal_verdict


def _err(size, met, noise, goal=2.0):
    return {"size": size, "goal_met": met, "goal_pct": goal, "measured_noise_pct": noise}


def test_a_quiet_run_is_judged_on_its_goals():
    v = goal_verdict({"udp": {"errors": [_err(0, True, 0.4), _err(1392, False, 1.1), _err(1393, True, 0.8, 5.0)]},
                      "tcp": {"errors": [_err(0, True, 0.6)]}})
    assert (v["met"], v["sizes"], v["judgeable"], v["met_judgeable"], v["median_noise_pct"]) == (3, 4, 4, 3, 0.6)
    assert "4 of 4 sizes moved by less than their goal, of which 3 met it" in v["text"]
    assert "too noisy" not in v["text"] and v["text"].startswith("model goals met at 3 of 4 sizes")


def test_a_noisy_run_says_it_cannot_judge_the_model():
    v = goal_verdict({"udp": {"errors": [_err(0, False, 22.2), _err(1392, False, 27.3),
                                         _err(1393, True, 4.0, 5.0), _err(8032, True, 1.5)]}})
    assert v["judgeable"] == 2 and v["median_noise_pct"] == 4.0
    assert "too noisy" not in v["text"]              # half of its sizes are still judgeable
    v = goal_verdict({"udp": {"errors": [_err(0, False, 22.2), _err(1392, False, 27.3), _err(8032, True, 1.5)]}})
    assert v["judgeable"] == 1 and v["met_judgeable"] == 1 and "too noisy for this run to judge the model" in v["text"]


def test_no_rows_or_no_noise():
    assert goal_verdict({}) is None
    v = goal_verdict({"udp": {"errors": [_err(0, True, None)]}})
    assert v["median_noise_pct"] is None and v["text"] == "model goals met at 1 of 1 sizes."


def test_noise_is_measured_in_the_kept_rounds_speed_level():
    """A capture's sweeps (collectors/capture.py) name the rounds that agree with the kept one: the
    noise of a figure is their spread, not the host's switch between levels in the other rounds."""
    from rpcscope.analysis.run import level_rounds_p50s, traced_noise_pct, untraced_noise_pct
    meta = {"untraced": {"p50": 20_000},
            "repeats": {"untraced_p50_ns": [26_600, 20_000, 20_200, 26_800, 19_800],
                        "traced_p50_ns": [42_200, 36_000, 36_400, 42_100, 36_200], "agreeing_rounds": [1, 2, 4]}}
    assert level_rounds_p50s(meta, "untraced") == [20_000, 20_200, 19_800]
    assert untraced_noise_pct(meta) == 1.0 and traced_noise_pct(meta) == 1.0
    del meta["repeats"]["agreeing_rounds"]              # a capture before session 14: every round
    assert untraced_noise_pct(meta) == 17.5


def test_measured_from_one_round_moves_as_far_as_all_the_rounds():
    """Where fewer than three rounds ran in the kept round's level, Measured is the kept round's own p50
    (level_p50_ns None): its noise is the spread of every round, not of the one or two that agree within
    3 % (session 34). The traced noise, which weighs the model's points, keeps to the level."""
    from rpcscope.analysis.run import level_p50_ns, traced_noise_pct, untraced_noise_pct
    meta = {"untraced": {"p50": 20_000},
            "repeats": {"untraced_p50_ns": [26_600, 20_000, 20_200, 26_800, 19_800],
                        "traced_p50_ns": [42_200, 36_000, 36_400, 42_100, 36_200], "agreeing_rounds": [1, 2]}}
    assert level_p50_ns(meta, "untraced") is None
    assert untraced_noise_pct(meta) == 17.5 and traced_noise_pct(meta) == 1.0
    meta["repeats"]["agreeing_rounds"] = [1]
    assert untraced_noise_pct(meta) == 17.5 and traced_noise_pct(meta) is None


def test_a_figure_of_the_level_is_the_median_of_three_rounds_or_more():
    from rpcscope.analysis.run import level_p50_ns
    meta = {"repeats": {"untraced_p50_ns": [26_600, 20_000, 20_200, 26_800, 19_800], "agreeing_rounds": [1, 2, 4]}}
    assert level_p50_ns(meta, "untraced") == 20_000
    meta["repeats"]["agreeing_rounds"] = [1, 2]
    assert level_p50_ns(meta, "untraced") is None
    del meta["repeats"]["agreeing_rounds"]              # a capture before session 14 does not say
    assert level_p50_ns(meta, "untraced") is None


def test_a_transport_whose_capture_never_settled_is_named():
    v = goal_verdict({"udp": {"errors": [_err(0, False, 0.4), _err(1392, True, 0.3)]},
                      "tcp": {"errors": [_err(0, True, 0.6)]}}, ["udp"])
    assert v["unsettled"] == ["udp"] and v["met"] == 2
    assert "UDP: the capture never settled" in v["text"] and v["text"].endswith("run again when the host is quiet.")
    assert "never settled" not in goal_verdict({"tcp": {"errors": [_err(0, True, 0.6)]}})["text"]


def test_sizes_whose_untraced_run_took_another_path_are_named():
    """A size whose untraced run blocked or was woken otherwise than its traced run (analysis/run.py
    path_shape) is named, and the goals are counted over the other sizes too."""
    other = dict(_err(8032, False, 0.9), untraced_path_same=False)
    v = goal_verdict({"udp": {"errors": [dict(_err(0, True, 0.4), untraced_path_same=True), other,
                                         dict(_err(4016, False, 0.5), untraced_path_same=True)]},
                      "tcp": {"errors": [_err(0, True, 0.6)]}})
    assert v["other_path"] == ["udp 8032"] and v["met_same_path"] == 2 and v["met"] == 2
    assert "At 1 size(s) (udp 8032) the untraced run took another path" in v["text"]
    assert "of the other 3 sizes, 2 met their goal" in v["text"]
    v = goal_verdict({"udp": {"errors": [dict(_err(0, True, 0.4), untraced_path_same=None)]}})
    assert v["other_path"] == [] and "another path" not in v["text"]


def test_the_mode_that_holds_an_other_path_sizes_p50_is_named(tmp_path):
    """Where the untraced calls fall in several modes (analysis/run.py untraced_modes, from the client's
    histogram), the verdict says which holds the p50, and which the model's RTT lies by where that is
    another; error_row_paths gives the goals, the report and `rpcscope run` that one rule."""
    import json
    import shutil
    from pathlib import Path

    from rpcscope.analysis.run import error_row_paths
    case = {"id": "tcp-maxarg-4016", "dir": "cases/tcp-maxarg-4016", "transport": "tcp", "size": 4016,
            "sleeps_per_call": {"untraced": {"client": 1.0, "server": 1.0, "client_ipi": 0.40, "server_ipi": 0.0},
                                "traced": {"client": 1.0, "server": 1.02, "client_ipi": 0.01, "server_ipi": 0.0}}}
    (tmp_path / case["dir"]).mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "fixtures" / "client-untraced-tcp-4016-three-modes.json",
                tmp_path / case["dir"] / "client-untraced.json")
    paths = error_row_paths(tmp_path, case)
    assert paths == {"untraced_path_same": False, "untraced_p50_mode": "p50 in mode 2 of 3"}
    # With the model's RTT: the mode it lies by, where that is not the p50's (its own calculated 14.53 us).
    paths = error_row_paths(tmp_path, case, 14.53)
    assert paths["untraced_p50_mode"] == "p50 in mode 2 of 3; the model by mode 1 (14.7 us, 17 %)"
    assert error_row_paths(tmp_path, case, 16.6)["untraced_p50_mode"] == "p50 in mode 2 of 3"
    assert error_row_paths(tmp_path, case, 21.0)["untraced_p50_mode"].endswith("by mode 3 (25.3 us, 38 %)")
    v = goal_verdict({"tcp": {"errors": [dict(_err(4016, False, 0.4), **paths), _err(0, True, 0.3)]}})
    assert ("At 1 size(s) (tcp 4016: p50 in mode 2 of 3; the model by mode 1 (14.7 us, 17 %)) the untraced run "
            "took another path") in v["text"]
    # One mode, or no histogram (clients before session 27): nothing named.
    res = json.loads((tmp_path / case["dir"] / "client-untraced.json").read_text())
    res["rtt_hist"]["counts"] = [0] * 20 + [5000]
    (tmp_path / case["dir"] / "client-untraced.json").write_text(json.dumps(res))
    assert error_row_paths(tmp_path, case)["untraced_p50_mode"] is None
    assert error_row_paths(tmp_path, None) == {"untraced_path_same": None, "untraced_p50_mode": None}


def test_runs_that_took_turns_are_taken_over_their_cases_round_factor():
    """With capture --turns a case's kinds ran side by side in each round: a round 30 % slower in every
    kind is no noise (case_round_factors); what moves one kind against the others is. Each round's
    p50 over its factor, at the kept round's, is one of the level's rounds: Measured is their median."""
    from rpcscope.analysis.run import (case_round_factors, level_p50_ns, level_rounds_p50s, traced_noise_pct,
                                       untraced_noise_pct)
    meta = {"untraced": {"p50": 20_000},
            "repeats": {"untraced_p50_ns": [20_000, 26_000, 20_000, 20_000, 20_000],
                        "traced_p50_ns": [30_000, 39_000, 30_000, 30_000, 30_000], "agreeing_rounds": [0, 1, 2, 3, 4], "kept_round": 0, "turns": {"turn_calls": 20}}}
    assert case_round_factors(meta) == pytest.approx([1.0, 1.3, 1.0, 1.0, 1.0])
    assert level_rounds_p50s(meta, "untraced") == pytest.approx([20_000] * 5)
    assert untraced_noise_pct(meta) == pytest.approx(0) and traced_noise_pct(meta) == pytest.approx(0)
    meta["repeats"]["traced_p50_ns"][4] = 30_600        # round 4: the traced run 2 % slower, alone
    f = 1.02 ** 0.5                                     # that round's factor: the mean of 0 and ln 1.02
    assert case_round_factors(meta)[4] == pytest.approx(f)
    assert level_p50_ns(meta, "untraced") == pytest.approx(20_000)
    assert untraced_noise_pct(meta) == pytest.approx(100 * (20_000 - 20_000 / f) / 2 / 20_000)
    assert traced_noise_pct(meta) == pytest.approx(100 * (30_600 / f - 30_000) / 2 / 20_000)
    meta["repeats"]["kept_round"] = 1                   # figures at the kept round's factor
    assert level_p50_ns(meta, "untraced") == pytest.approx(26_000)
    del meta["repeats"]["turns"]                        # not taking turns: the host's moves are noise
    assert case_round_factors(meta) is None and untraced_noise_pct(meta) == pytest.approx(15.0)
