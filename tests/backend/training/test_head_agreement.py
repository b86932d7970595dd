"""scripts/head_agreement.py on the tiny target: every trainable kind's loss metrics read as one agreement
share per draft position, the target as its own student agrees everywhere, and the draft vocabulary's
coverage counts the next tokens a reduced vocabulary holds; only caches holding the states a head reads are used."""

from __future__ import annotations

import pytest
import torch

from backend.drafters import eagle3
from backend.drafters.trained import TargetParts
from backend.training import student
from backend.training.kinds import KINDS
from scripts.head_agreement import agreement, draftable_tokens, split_agreement, usable_caches
from tests.helpers.trained import batch_of, random_prompts

STUDENT_SHAPE = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kinds_metrics_read_as_a_share_per_draft_position(tiny, name):
    kind = KINDS[name]
    head = kind.new_head(tiny, STUDENT_SHAPE if kind is student else None)
    torch.manual_seed(0)  # block drafters draw their anchors
    with torch.no_grad():
        _, metrics = kind.training_loss(head, TargetParts.of(tiny), batch_of(tiny, random_prompts(4)))
    shares = agreement(metrics)
    assert shares and all(isinstance(share, float) and 0.0 <= share <= 1.0 for share in shares)
    if name in ("eagle3", "mtp"):  # a chain head scores each of its own steps
        assert len(shares) == len([metric for metric in metrics if metric.startswith("acc_step")]) > 1


def test_the_target_as_its_own_student_agrees_everywhere_and_a_fresh_one_does_not(tiny, distilled):
    train_data, _, _ = distilled
    parts = TargetParts.of(tiny)
    whole = draftable_tokens(tiny.model, tiny)
    assert bool(whole.all())  # no reduced vocabulary: every token
    own, covered = split_agreement(student, tiny.model, parts, train_data, whole, 2, tiny.device)
    assert own == [1.0] and covered == 1.0
    fresh, _ = split_agreement(student, student.new_head(tiny, STUDENT_SHAPE), parts, train_data, whole, 2, tiny.device)
    assert len(fresh) == 1 and fresh[0] < 0.9


def test_a_reduced_draft_vocabulary_holds_only_its_tokens_and_its_coverage_counts_them(tiny, distilled):
    train_data, _, _ = distilled
    parts = TargetParts.of(tiny)
    d2t = torch.tensor([0, 3, 5, 7, 11, 13])
    reduced = draftable_tokens(eagle3.new_head(tiny, d2t=d2t), tiny)
    assert reduced.nonzero().flatten().tolist() == d2t.tolist()
    _, whole_coverage = split_agreement(
        student, tiny.model, parts, train_data, torch.ones_like(reduced), 2, tiny.device
    )
    _, reduced_coverage = split_agreement(student, tiny.model, parts, train_data, reduced, 2, tiny.device)
    assert whole_coverage == 1.0 and reduced_coverage < 1.0


def test_only_caches_holding_every_state_a_head_reads_are_used(tiny, distilled, tmp_path):
    train_data, _, _ = distilled
    (cache,) = train_data.folders
    layers = set(train_data.layers)
    assert usable_caches(cache.parent, tiny, layers) == [(cache, train_data.layers)]
    assert usable_caches(cache.parent, tiny, layers | {max(layers) + 1}) == []  # a state it does not hold
    assert usable_caches(tmp_path, tiny, layers) == []  # no cache at all: the script says how to fill one
    (tmp_path / f"{tiny.fingerprint[:16]}-unfinished").mkdir()  # a distillation stopped before its first shard
    assert usable_caches(tmp_path, tiny, layers) == []
