"""Speculative sampling on token trees keeps the target's distribution exactly.

The rule alone (`tree_rejection_verify`): on fixed 5-token distributions and a tree with a likely root
child, a child of probability zero, a duplicate sibling and children below, the first two tokens of
its verdicts are compared with the exact joint by a chi-square test at significance 0.001; two broken
rules must fail the same test, and on a chain the rule must draw exactly as `rejection_verify` does.
Then through the engine: the tiny 12-token target of the chain sampling tests with a drafter that
proposes a fixed branching tree, at T=1 and at T=0.7 with top-k and top-p, and a broken rule swapped in.
"""

from __future__ import annotations

import pytest
import torch

import backend.core.verify
from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.tree import TreeLayout
from backend.core.tree_shape import within_depth
from backend.core.verify import SamplingParams, draw, rejection_verify, tree_rejection_verify
from tests.helpers.sampling import (
    PROMPT,
    SAMPLES,
    SETTINGS,
    SIGNIFICANCE,
    broken_tree_rule,
    exact_joint,
    goodness_of_fit,
    sampled_joint,
)

CPU = torch.device("cpu")
RULE_SAMPLES = 10000

# the rule alone: p(t1) with token 3 impossible, and p(t2 | t1) per row
FIRST = torch.tensor([0.15, 0.3, 0.4, 0.0, 0.15])  # [V]
SECOND = torch.softmax(1.5 * torch.randn(5, 5, generator=torch.Generator().manual_seed(0)), dim=-1)  # [V, V]
# root children 2, 3 (probability 0), 2 again (a duplicate) and 0; two children under the first 2, one under 0
PARENTS = [-1, -1, -1, -1, 0, 0, 3]
TOKENS = [2, 3, 2, 0, *SECOND[2].argsort(descending=True)[[0, -1]].tolist(), int(SECOND[0].argmax())]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny models' matrices are too small to share out: on a busy CPU one thread runs these loops
    many times faster than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rule_probs() -> torch.Tensor:
    """[N+1, V] the rows a target pass would give the tree: p(t1) at the root, p(t2 | d_n) at a root
    child n, and any distribution (uniform) deeper, where the third token is decided."""
    rows = [
        SECOND[token] if parent < 0 else torch.full((5,), 0.2) for token, parent in zip(TOKENS, PARENTS, strict=True)
    ]
    return torch.stack([FIRST, *rows])


def rule_joint(rule, samples: int = RULE_SAMPLES) -> torch.Tensor:
    """[V, V] counts of the first two tokens: the kept path and the rule's token, then (when the step
    gave only one token) the next step's plain draw from p(t2 | t1)."""
    probs, layout, generator = rule_probs(), TreeLayout.of(PARENTS, CPU), torch.Generator().manual_seed(0)
    counts = torch.zeros(5, 5)
    for _ in range(samples):
        verdict = rule(probs, TOKENS, layout, generator)
        out = [*(TOKENS[node] for node in verdict.path), verdict.token]
        if len(out) < 2:
            out.append(int(draw(SECOND[out[0]], generator)))
        counts[out[0], out[1]] += 1
    return counts


def test_the_tree_rule_samples_the_exact_joint():
    counts = rule_joint(tree_rejection_verify)
    assert goodness_of_fit(counts, FIRST[:, None] * SECOND) > SIGNIFICANCE


@pytest.mark.parametrize("remove_rejected", [True, False], ids=["unnormalised", "rejected-kept"])
def test_the_check_catches_a_broken_tree_rule(remove_rejected):
    counts = rule_joint(broken_tree_rule(remove_rejected))
    assert goodness_of_fit(counts, FIRST[:, None] * SECOND) < 1e-6


def test_a_zero_probability_child_and_a_duplicate_sibling_are_never_kept():
    probs, layout = rule_probs(), TreeLayout.of(PARENTS, CPU)
    generator = torch.Generator().manual_seed(1)
    first_kept = {tree_rejection_verify(probs, TOKENS, layout, generator).path[:1] for _ in range(500)}
    assert first_kept == {(), (0,), (3,)}  # never node 1 (p = 0) nor node 2 (a second 2)


@pytest.mark.parametrize("seed", range(40))
def test_on_a_chain_the_tree_rule_draws_as_rejection_verify(seed):
    source = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2 * torch.randn(4, 8, generator=source), dim=-1)  # [D+1, V]
    drafted = torch.multinomial(probs[:3], 1, generator=source)[:, 0]  # [D] likely drafts, sometimes not
    chain = rejection_verify(probs, drafted, None, torch.Generator().manual_seed(seed))
    tree = tree_rejection_verify(
        probs, drafted.tolist(), TreeLayout.of([-1, 0, 1], CPU), torch.Generator().manual_seed(seed)
    )
    assert (tree.accepted, tree.token, tree.path) == (chain.accepted, chain.token, tuple(range(chain.accepted)))


class FixedTreeDrafter:
    """Proposes the same tree every step, cut to the request's depth and node budget."""

    name = "fixed-tree"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, tokens: list[int], parents: list[int]) -> None:
        self.tokens, self.parents = tokens, parents

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        return self

    def propose(self, request: DraftRequest) -> Draft:
        kept, parents = within_depth(self.parents, request.max_tokens)
        kept, parents = kept[: request.max_nodes], parents[: request.max_nodes]
        return Draft([self.tokens[node] for node in kept], parents=parents)

    def observe(self, outcome: StepOutcome) -> None:
        pass

    def close(self) -> None:
        pass


def ranked_tree(target) -> FixedTreeDrafter:
    """The target's best first token, its worst, the best again (a duplicate) and its second best;
    under the best its best and worst next token, under the second best its best."""
    joint = exact_joint(target, SamplingParams(temperature=1.0))  # [V, V]
    first = joint.sum(dim=1).argsort(descending=True).tolist()
    below = [joint[token].argsort(descending=True).tolist() for token in first[:2]]
    tokens = [first[0], first[-1], first[0], first[1], below[0][0], below[0][-1], below[1][0]]
    return FixedTreeDrafter(tokens, PARENTS)


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
def test_tree_sampling_through_the_engine_matches_the_target(pair, sampling):
    target, _ = pair
    counts = sampled_joint(target, ranked_tree(target), sampling, 2, samples=SAMPLES, tree_budget=8)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


def test_engine_tree_steps_keep_later_siblings_and_deeper_nodes(pair):
    target, _ = pair
    engine = SpeculativeEngine(target.model, eos_ids=set(), max_context=64)
    drafter, sampling = ranked_tree(target), SamplingParams(temperature=1.0)
    kept: set[tuple[int, ...]] = set()
    for seed in range(60):
        settings = GenerationSettings(3, 2, sampling, seed, tree_budget=8)
        step = engine.generate(PROMPT, drafter, settings).run().steps[0]
        assert step.parents == PARENTS and step.accepted == len(step.accepted_path)
        assert step.emitted == [*(drafter.tokens[node] for node in step.accepted_path), step.target_token]
        assert len(step.target_probs) == len(PARENTS) and 0 < step.target_token_prob <= 1
        kept.add(tuple(step.accepted_path[:1]))
    assert {(0,), (3,)} <= kept and (2,) not in kept  # node 2 repeats node 0's token


def test_the_engine_check_catches_a_broken_tree_rule(pair, monkeypatch):
    target, _ = pair
    monkeypatch.setattr(backend.core.verify, "tree_rejection_verify", broken_tree_rule(remove_rejected=False))
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, ranked_tree(target), sampling, 2, samples=SAMPLES, tree_budget=8)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) < 1e-6
