"""The draft-length policies: fixed D, and auto's grow / shrink / pay-off rules."""

import pytest

from backend.core.errors import SpecScopeError
from backend.core.policy import AdaptiveDraftLength, FixedDraftLength, make_policy


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
    policy.observe(0, 0, 0.05, None, None)
    assert policy.choose(8, None) == 4  # then drafting, at the starting cap


def test_auto_cap_doubles_on_full_acceptance_and_shrinks_on_rejection():
    policy = AdaptiveDraftLength(free_drafter=True, d_max=16)
    policy.observe(4, 4, 0.06, "n3", True)
    assert policy.cap == 8
    policy.observe(8, 8, 0.06, "n3", True)
    policy.observe(16, 16, 0.06, "n3", True)
    assert policy.cap == 16
    policy.observe(16, 3, 0.06, "n3", True)
    assert policy.cap == 4


def cpu_like(policy: AdaptiveDraftLength) -> None:
    """Verification of any draft costs twice a plain step, as on a 2-core CPU."""
    policy.observe(0, 0, 0.05, None, None)
    for k in (1, 4, 8, 16):
        policy.step_seconds[k] = 0.10


def test_auto_stops_verifying_drafts_that_keep_failing():
    policy = AdaptiveDraftLength(free_drafter=True)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(2, 0, 0.10, "n1", False)
    assert policy.choose(8, "n1") == 0  # expected gain below the cost of verifying


def test_auto_verifies_strong_evidence_but_not_weak():
    policy = AdaptiveDraftLength(free_drafter=True)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(0, 0, 0.05, "n1", False)  # unverified weak matches were wrong
        policy.observe(0, 0, 0.05, "n4", True)  # strong matches were right
        policy.observe(8, 8, 0.10, "n4", True)
    assert policy.choose(16, "n1") == 0
    assert policy.choose(16, "n4") == 16


def test_auto_probes_a_costly_drafter_after_plain_steps():
    policy = AdaptiveDraftLength(free_drafter=False, probe_every=3)
    cpu_like(policy)
    for _ in range(10):
        policy.observe(2, 0, 0.10, None, False)
    assert policy.choose(4, None) == 0
    for _ in range(3):
        policy.observe(0, 0, 0.05, None, None)
    assert policy.choose(4, None) == 2  # probe at the (shrunk) cap
