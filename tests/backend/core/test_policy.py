"""The draft-length policies: fixed D, and auto's grow / shrink / pay-off rules."""

import pytest

from backend.core.errors import SpecScopeError
from backend.core.policy import AdaptiveDraftLength, DecayedRate, FixedDraftLength, StepObservation, make_policy


def test_fixed_policy_verifies_what_is_available_up_to_d():
    policy = make_policy(4, free_drafter=True)
    assert isinstance(policy, FixedDraftLength)
    assert (policy.choose(10, None), policy.choose(2, None), policy.cap) == (4, 2, 4)


@pytest.mark.parametrize("bad", [-1, 65, "x", None])
def test_bad_draft_lengths(bad):
    with pytest.raises(SpecScopeError):
        make_policy(bad, free_drafter=True)


def test_auto_measures_plain_then_tries_drafting():
    policy = AdaptiveDraftLength(free_drafter=True)
    assert policy.choose(8, None) == 0  # first a plain step, to have a baseline time
    policy.observe(StepObservation(0, 0, 0.05, None, None))
    assert policy.choose(8, None) == 4  # then drafting, at the starting cap


def test_auto_cap_doubles_on_full_acceptance_and_shrinks_on_rejection():
    policy = AdaptiveDraftLength(free_drafter=True, d_max=16)
    policy.observe(StepObservation(4, 4, 0.06, "n3", True))
    assert policy.cap == 8
    policy.observe(StepObservation(8, 8, 0.06, "n3", True))
    policy.observe(StepObservation(16, 16, 0.06, "n3", True))
    assert policy.cap == 16
    policy.observe(StepObservation(16, 3, 0.06, "n3", True))
    assert policy.cap == 4


def cpu_like(policy: AdaptiveDraftLength) -> None:
    """Verification of any draft costs twice a plain step, as on a 2-core CPU."""
    policy.observe(StepObservation(0, 0, 0.05, None, None))
    for k in (1, 4, 8, 16):
        policy.step_seconds[k] = 0.10


def test_auto_stops_verifying_drafts_that_keep_failing():
    policy = AdaptiveDraftLength(free_drafter=True)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(StepObservation(2, 0, 0.10, "n1", False))
    assert policy.choose(8, "n1") == 0  # expected gain below the cost of verifying


def test_auto_verifies_strong_evidence_but_not_weak():
    policy = AdaptiveDraftLength(free_drafter=True)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(StepObservation(0, 0, 0.05, "n1", False))  # unverified weak matches were wrong
        policy.observe(StepObservation(0, 0, 0.05, "n4", True))  # strong matches were right
        policy.observe(StepObservation(8, 8, 0.10, "n4", True))
    assert policy.choose(16, "n1") == 0
    assert policy.choose(16, "n4") == 16


def test_auto_probes_a_costly_drafter_after_plain_steps():
    policy = AdaptiveDraftLength(free_drafter=False, probe_every=3)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(StepObservation(2, 0, 0.10, None, False))
    assert policy.choose(4, None) == 0
    for _ in range(3):
        policy.observe(StepObservation(0, 0, 0.05, None, None))
    assert policy.choose(4, None) == 2  # probe at the (shrunk) cap


def test_auto_keeps_a_costly_drafters_early_stops_out_of_the_plain_step_time():
    """A drafter that stops before its first token (low confidence) was still paid for: its step is no
    plain step, so a plain step stays cheap in the estimate and such drafting stops paying."""
    policy = AdaptiveDraftLength(free_drafter=False, probe_every=100)
    cpu_like(policy)
    for _ in range(20):
        policy.observe(StepObservation(0, 0, 0.09, None, None, asked=2))  # drafting cost 0.04 s and gave nothing
        policy.observe(StepObservation(1, 1, 0.10, None, True))  # the rest of the time one draft is accepted
    assert policy.step_seconds[0] == pytest.approx(0.05)
    assert policy.first[None].value == pytest.approx(0.5, abs=0.1)  # stops count as missed first drafts
    assert policy.choose(1, None) == 0  # ~1.5 tokens per 0.10 s loses to 1 per 0.05 s
    for _ in range(20):  # without `asked`, the same steps are timed as plain ones
        policy.observe(StepObservation(0, 0, 0.09, None, None))
    assert policy.step_seconds[0] == pytest.approx(0.09, rel=1e-3)
    assert policy.choose(1, None) == 1  # and drafting would look worth it


def test_auto_scores_a_costly_drafters_stop_cut_asks_as_asks():
    """Asked for 4 drafts, a chain with a confidence stop returns none half the time (one draft step, 0.06 s)
    and one accepted draft the other half (0.10 s): asking gives 1.5 tokens per 0.08 s, less than plain
    decoding's 1 per 0.05 s. Timing only the empty asks as t(4) and the others as t(1) made asking look
    like ~1.9 tokens per 0.06 s."""
    policy = AdaptiveDraftLength(free_drafter=False, probe_every=100)
    policy.observe(StepObservation(0, 0, 0.05, None, None))
    for _ in range(20):
        policy.observe(StepObservation(0, 0, 0.06, None, None, asked=4))
        policy.observe(StepObservation(1, 1, 0.10, None, True, asked=4))
    assert sorted(policy.step_seconds) == [0, 4]
    assert policy.step_seconds[4] == pytest.approx(0.08, abs=0.01)
    assert policy.first[None].value == pytest.approx(0.5, abs=0.1)
    assert policy.later.value < 0.1  # the three drafts after an accepted one were never returned
    assert policy.cap == 2  # a cut-short ask is no full acceptance: the cap does not grow
    assert policy.choose(4, None) == 1  # one draft, read off the line at 0.0575 s, might pay: try it
    for _ in range(20):  # asked for one, the same outcomes at the same cost
        policy.observe(StepObservation(0, 0, 0.06, None, None, asked=1))
        policy.observe(StepObservation(1, 1, 0.10, None, True, asked=1))
    assert policy.choose(4, None) == 0


def test_auto_tries_one_draft_where_it_pays_though_only_longer_drafts_were_timed():
    """On a CPU a step's time grows with the drafts it verifies: with t(0) = 20 ms and t(4) = 36 ms timed,
    one draft (about 24 ms) accepted 40% of the time beats plain decoding, while four do not."""
    policy = AdaptiveDraftLength(free_drafter=False)
    policy.observe(StepObservation(0, 0, 0.020, None, None))
    policy.observe(StepObservation(4, 0, 0.036, None, False))
    policy.first[None], policy.later = DecayedRate(0.4, 0.8), DecayedRate(0.3, 0.8)
    assert policy.cap == 2
    assert policy.choose(policy.cap, None) == 1


def test_auto_reads_unmeasured_draft_lengths_off_the_measured_line():
    policy = AdaptiveDraftLength(free_drafter=True)
    policy.step_seconds.update({0: 0.020, 2: 0.028, 4: 0.040})
    assert policy._seconds_for(1) == pytest.approx(0.024)  # between 0 and 2
    assert policy._seconds_for(3) == pytest.approx(0.034)  # between 2 and 4
    assert policy._seconds_for(8) == pytest.approx(0.064)  # past 4, along the line through 2 and 4
    policy.step_seconds.update({2: 0.045})  # a noisy measurement: longer drafts never get cheaper
    assert policy._seconds_for(8) == pytest.approx(0.045)
    assert policy._seconds_for(4) == pytest.approx(0.040)  # a measured k is its own time
