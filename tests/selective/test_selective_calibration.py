"""Threshold calibration: exact hand-computed choices, degenerate inputs, and the guarantee."""

import numpy as np
import pytest
from scipy.stats import binom

from cbm.selective import CalibrationError, accuracy_lower_bound, calibrate, calibrate_ltt, ltt_grid
from cbm.selective.calibration import cut_table, min_accepted

T, F = True, False


# ----------------------------------------------------------------------------- empirical
@pytest.mark.parametrize(
    "target,tau,n_acc,acc",
    [
        (0.75, 0.6, 5, 0.8),  # cuts: 1/1, 2/2, 2/3, 3/4, 4/5, 4/6 -> widest >= .75 is 4/5
        (0.8, 0.6, 5, 0.8),  # exactly on the target counts as meeting it
        (0.81, 0.85, 2, 1.0),  # 3/4 and 4/5 fall short -> back to the top two
        (0.5, 0.0, 6, 4 / 6),  # everything: tau below the smallest score
    ],
)
def test_empirical_picks_the_widest_coverage_meeting_the_target(target, tau, n_acc, acc):
    scores = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6]
    correct = [T, T, F, T, T, F]
    cal = calibrate(scores, correct, target, method="empirical")
    assert (cal.tau, cal.n_accepted, cal.selective_acc_cal) == (tau, n_acc, acc)
    assert cal.coverage_cal == n_acc / 6 and cal.n_cal == 6 and not cal.guaranteed
    assert (np.asarray(scores) > cal.tau).sum() == n_acc  # the rule is score > tau


def test_ties_are_never_split():
    scores, correct = [0.9, 0.8, 0.8, 0.7], [T, T, F, T]
    assert calibrate(scores, correct, 0.8, method="empirical").tau == 0.8  # only {0.9}: 2/3 with the tie
    cal = calibrate(scores, correct, 0.7, method="empirical")
    assert (cal.tau, cal.n_accepted) == (0.0, 4)
    tau, n_acc, n_cor = cut_table(np.array(scores), np.array(correct))
    assert (
        tau.tolist() == [0.9, 0.8, 0.7, 0.0]
        and n_acc.tolist() == [0, 1, 3, 4]
        and n_cor.tolist() == [0, 1, 2, 3]
    )


# ----------------------------------------------------------------------------- SGR
def test_sgr_binary_search_by_hand():
    # n=8 -> 3 steps at level 0.3/3 = 0.1; target 0.5 (p-value of k/n: P(Binom(n, .5) >= k)).
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    correct = [F, F, F, T, T, T, T, T]
    # z=5: accept >= 0.5, 4/4, p=1/16 -> pass, go lower; z=3: >= 0.3, 5/6, p=7/64=.109 -> fail;
    # z=4: >= 0.4, 5/5, p=1/32 -> pass. Widest pass: accept >= 0.4, i.e. tau = 0.3.
    cal = calibrate(scores, correct, 0.5, method="sgr", delta=0.3)
    assert (cal.tau, cal.n_accepted, cal.selective_acc_cal, cal.n_thresholds) == (0.3, 5, 1.0, 3)
    assert cal.bound == pytest.approx(0.1 ** (1 / 5))  # Clopper-Pearson lower bound at level delta/3
    assert cal.guaranteed and cal.bound >= 0.5


# ----------------------------------------------------------------------------- LTT
def ltt_case(extra_scores=(), extra_correct=()):
    scores = [0.95] * 3 + [0.85] * 3 + [0.75] * 4 + [0.5] * 10 + list(extra_scores)
    correct = [T] * 3 + [T] * 3 + [T, T, F, F] + [F] * 10 + list(extra_correct)
    return np.array(scores), np.array(correct)


GRID = [1.0, 0.9, 0.8, 0.7, 0.6, 0.0]


def test_ltt_fixed_sequence_by_hand():
    # target .5, delta .125; p-values: tau=.9: 3/3 -> 1/8 (reject), .8: 6/6 -> 1/64, .7 and .6: 8/10 -> 56/1024,
    # 0: 8/20 -> 0.87 (stop). Last rejection: tau = 0.6.
    s, c = ltt_case()
    cal = calibrate_ltt(s, c, 0.5, 0.125, grid=GRID, start_accepted=3)
    assert (cal.tau, cal.n_accepted, cal.selective_acc_cal) == (0.6, 10, 0.8)
    assert cal.n_thresholds == 4 and cal.guaranteed
    assert binom.sf(7, 10, 0.5) == pytest.approx(56 / 1024)
    assert cal.bound == pytest.approx(float(accuracy_lower_bound(8, 10, 0.125)))


def test_ltt_stops_at_the_first_non_rejection():
    # A wrong block at 0.65 fails the test at tau=0.6 (8/14); a good block at 0.55 would pass at tau=0
    # (28/44, p=0.04), but fixed-sequence testing never gets there.
    s, c = ltt_case([0.65] * 4 + [0.55] * 20, [F] * 4 + [T] * 20)
    assert binom.sf(27, 44, 0.5) < 0.125 < binom.sf(7, 14, 0.5)
    assert calibrate_ltt(s, c, 0.5, 0.125, grid=GRID, start_accepted=3).tau == 0.7


def test_ltt_default_start_skips_thresholds_with_too_few_examples():
    # Default start: min(4 * n_min, n) = 12 accepted; the first such threshold (tau=0, 8/20) fails.
    assert min_accepted(0.5, 0.125) == 3 and min_accepted(0.95, 0.1) == 45 and min_accepted(1.0, 0.1) is None
    s, c = ltt_case()
    with pytest.raises(
        CalibrationError, match="ltt calibration: no threshold reaches selective accuracy 50.00%"
    ):
        calibrate_ltt(s, c, 0.5, 0.125, grid=GRID)


def test_ltt_grid_is_fixed_and_descending():
    g = ltt_grid()
    assert g[0] == 1.0 and g[-1] == 0.0 and np.all(np.diff(g) < 0) and np.any(g > 0.9999)


def test_bound_matches_clopper_pearson():
    assert accuracy_lower_bound(10, 10, 0.05) == pytest.approx(0.05**0.1)
    lo = float(accuracy_lower_bound(45, 50, 0.1))
    assert binom.sf(44, 50, lo) == pytest.approx(0.1)  # P(Binom(50, L) >= 45) = delta
    assert accuracy_lower_bound(0, 5, 0.1) == 0.0 and accuracy_lower_bound(0, 0, 0.1) == 0.0


# ----------------------------------------------------------------------------- degenerate inputs
@pytest.mark.parametrize("method", ["empirical", "sgr", "ltt"])
def test_empty_calibration_split_has_a_clear_message(method):
    with pytest.raises(CalibrationError) as err:
        calibrate([], [], method=method)
    assert str(err.value) == (
        "calibration split is empty: cannot calibrate the abstention threshold (need labelled held-out examples)"
    )


def test_no_threshold_meets_the_target_messages():
    with pytest.raises(CalibrationError) as err:
        calibrate([0.9, 0.8, 0.7], [F, T, F], 0.95, method="empirical")
    assert str(err.value) == (
        "empirical calibration: no threshold reaches selective accuracy 95.00% on the 3 calibration examples "
        "(best calibration selective accuracy 50.00% at coverage 66.67%); lower target_accuracy or improve the model"
    )
    for method in ("sgr", "ltt"):  # 20 perfect examples cannot certify 95% at delta=0.1 (45 are needed)
        with pytest.raises(CalibrationError) as err:
            calibrate(np.linspace(0.6, 0.99, 20), [T] * 20, 0.95, method=method, delta=0.1)
        msg = str(err.value)
        assert msg.startswith(
            f"{method} calibration: no threshold reaches selective accuracy 95.00% with confidence 90%"
        )
        assert msg.endswith("(at least 45 accepted examples are needed even with no errors)")


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"method": "magic"}, "calibration method must be one of"),
        ({"target_accuracy": 0.0}, r"target_accuracy must be in \(0, 1\]"),
        ({"delta": 1.0}, r"delta must be in \(0, 1\)"),
    ],
)
def test_bad_requests(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        calibrate([0.9], [T], **kwargs)


def test_bad_arrays():
    with pytest.raises(ValueError, match="same length"):
        calibrate([0.9, 0.8], [T])
    with pytest.raises(ValueError, match="must be finite"):
        calibrate([0.9, np.nan], [T, T])


# ----------------------------------------------------------------------------- the guarantee
def true_selective_accuracy(tau):
    """Scores ~ U(0.5, 1), P(correct | s) = s: accuracy of {s > tau} is (1 + max(tau, .5)) / 2."""
    return (1.0 + np.clip(tau, 0.5, 1.0)) / 2.0


def violation_rates(n_trials=250, n_cal=2000, target=0.9, delta=0.1, seed=0):
    rng = np.random.default_rng(seed)
    viol = {m: 0 for m in ("empirical", "sgr", "ltt")}
    refused = dict.fromkeys(viol, 0)
    for _ in range(n_trials):
        s = rng.uniform(0.5, 1.0, n_cal)
        c = rng.random(n_cal) < s
        for m in viol:
            try:
                tau = calibrate(s, c, target, method=m, delta=delta).tau
            except CalibrationError:
                refused[m] += 1  # abstaining on everything never violates the target
                continue
            viol[m] += true_selective_accuracy(tau) < target
    return {m: v / n_trials for m, v in viol.items()}, {m: r / n_trials for m, r in refused.items()}


def test_the_guaranteed_methods_keep_their_promise_and_empirical_does_not():
    # Sanity check of the closed form against a large sample.
    rng = np.random.default_rng(1)
    s = rng.uniform(0.5, 1.0, 400_000)
    c = rng.random(s.size) < s
    assert c[s > 0.8].mean() == pytest.approx(true_selective_accuracy(0.8), abs=3e-3)

    n_trials, delta = 250, 0.1
    rates, refused = violation_rates(n_trials=n_trials, delta=delta)
    tolerance = 3 * np.sqrt(delta * (1 - delta) / n_trials)
    assert rates["sgr"] <= delta + tolerance and rates["ltt"] <= delta + tolerance, rates
    assert rates["empirical"] >= 0.3, rates  # picks the widest coverage that *looked* good: ~50% violations
    assert refused["empirical"] == 0 and refused["sgr"] <= 0.05 and refused["ltt"] <= 0.05, refused
