"""The sampling test's statistics: the exact joint distribution of a tiny target's first two tokens,
the engine's samples of it with a drafter, and a chi-square goodness of fit; plus deliberately broken
acceptance rules (for chains and for trees) that the test must catch."""

from __future__ import annotations

from collections.abc import Callable

import torch
from scipy.stats import chisquare

from backend.core.batch import BatchEngine
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.tree import TreeLayout
from backend.core.tree_shape import children
from backend.core.verify import SamplingParams, Verdict, draw, target_probs
from tests.helpers.tiny import tiny_llama, tiny_tokenizer

VOCAB = 12
PROMPT = [4, 5, 6, 7, 4, 5, 6, 7, 4, 5]
SAMPLES = 1500
# the every-drafter loop and the compiled engine's check sample less (the rule itself is tested at SAMPLES);
# their broken-rule checks show this count still rejects a wrong rule
REGISTRY_SAMPLES = 600
SIGNIFICANCE = 1e-3
BATCH_ROWS = 100  # generations sharing each target pass (test_batch_sampling.py: each row draws as it would alone)


@torch.inference_mode()
def exact_joint(target, sampling: SamplingParams) -> torch.Tensor:
    """P(t1, t2) as a [V, V] table, from the target's processed next-token distributions."""

    def next_probs(ids):
        return target_probs(target.model(torch.tensor([ids])).logits[0, -1:], sampling)[0]

    first = next_probs(PROMPT)  # [V]
    return torch.stack([first[t] * next_probs(PROMPT + [t]) for t in range(VOCAB)])  # [V, V]


def sampled_joint(
    target,
    drafter,
    sampling: SamplingParams,
    draft_len,
    compile: str = "off",
    samples: int = SAMPLES,
    tree_budget: int = 0,
    min_confidence: float = 0.0,
    rows: int = BATCH_ROWS,
) -> torch.Tensor:
    """Counts [V, V] of the first two tokens of `samples` generations seeded 0 .. samples - 1. `rows` of them
    share each target pass (batch.py, row r seeded settings.seed + r: the tokens a single sequence with that
    seed draws, test_batch_sampling.py); rows=1 runs each alone on the single-sequence engine."""
    engine = SpeculativeEngine(target.model, eos_ids=set(), max_context=64, compile=compile)
    counts = torch.zeros(VOCAB, VOCAB)
    for first_seed in range(0, samples, rows):
        # 3 new tokens: the first step drafts up to 2 deep (the cap leaves room for the target's own token)
        settings = GenerationSettings(
            max_new_tokens=3,
            draft_len=draft_len,
            sampling=sampling,
            seed=first_seed,
            tree_budget=tree_budget,
            min_confidence=min_confidence,
        )
        batch = min(rows, samples - first_seed)
        if batch == 1:
            outputs = [engine.generate(PROMPT, drafter, settings).run().output_ids]
        else:
            outputs = [row.output_ids for row in BatchEngine(engine).generate([PROMPT] * batch, drafter, settings).rows]
        for out in outputs:
            counts[out[0], out[1]] += 1
    return counts


def tree_sampling_fits(target, drafter, sampling: SamplingParams, tree_budget: int, samples: int = SAMPLES) -> float:
    """The chi-square p-value of sampling through `drafter`'s token trees, after checking that its
    drafts really branch on PROMPT (else the test would only see chains)."""
    engine = SpeculativeEngine(target.model, eos_ids=set(), max_context=64)
    settings = GenerationSettings(12, 2, sampling, seed=0, tree_budget=tree_budget)
    steps = engine.generate(PROMPT, drafter, settings).run().steps
    assert any(step.parents is not None for step in steps), "no step drafted a branching tree"
    counts = sampled_joint(target, drafter, sampling, 2, samples=samples, tree_budget=tree_budget)
    return goodness_of_fit(counts, exact_joint(target, sampling))


def goodness_of_fit(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square p-value; cells expecting fewer than 5 samples are pooled into one. A sample in a
    cell of probability zero (outside top-k / top-p) fails outright."""
    expected = (probs * counts.sum()).flatten()
    observed = counts.flatten()
    assert observed[expected == 0].sum() == 0, "sampled a token the target gives probability zero"
    small = (expected < 5) & (expected > 0)
    keep = expected >= 5
    expected = torch.cat([expected[keep], expected[small].sum()[None]])
    observed = torch.cat([observed[keep], observed[small].sum()[None]])
    if expected[-1] == 0:
        expected, observed = expected[:-1], observed[:-1]
    expected = expected * observed.sum() / expected.sum()
    return float(chisquare(observed.numpy(), expected.numpy()).pvalue)


SETTINGS = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=6, top_p=0.9)]


def accept_all(probs, drafted, draft_probs, generator) -> Verdict:
    """A broken rule: every draft accepted, whatever the target thinks of it."""
    return Verdict(len(drafted), int(torch.multinomial(probs[len(drafted)], 1, generator=generator)))


def broken_tree_rule(remove_rejected: bool) -> Callable[..., Verdict]:
    """A broken tree rule (tree_rejection_verify's signature): child c kept with probability r(d_c), not
    r(d_c) / sum(r). With `remove_rejected` r still loses each rejected sibling's token, as the right rule
    does; without it r stays p, so a rejected token may come back as the drawn one."""

    def rule(probs: torch.Tensor, drafted: list[int], tree: TreeLayout, generator: torch.Generator) -> Verdict:
        below = children(list(tree.parents))
        path: list[int] = []
        row, residual = 0, probs[0].clone()  # [V]
        while True:
            kept = None
            for child in below[row]:
                if float(torch.rand(1, generator=generator)) < float(residual[drafted[child]]):
                    kept = child
                    break
                if remove_rejected:
                    residual[drafted[child]] = 0.0
            if kept is None:
                return Verdict(len(path), int(draw(residual, generator)), probs, tuple(path))
            path.append(kept)
            row, residual = kept + 1, probs[kept + 1].clone()

    return rule


def sampling_model(seed: int = 3, layers: int = 2):
    """A 12-token target (or, with another seed and depth, its draft), peaked enough to give a powerful
    chi-square test."""
    return tiny_llama(
        seed=seed,
        vocab_size=VOCAB,
        layers=layers,
        hidden=32,
        heads=2,
        kv_heads=1,
        init_scale=0.3,
        tokenizer=tiny_tokenizer(VOCAB),
    )
