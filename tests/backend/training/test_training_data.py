"""The training data pipeline: the corpus (deterministic, held out from the evaluation suites), the
self-distillation cache (answers are the target's greedy output, hidden states those of a fresh
forward, resumable) and the training batches."""

from __future__ import annotations

import torch

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.lab.prompts import encode_conversation
from backend.training.corpus import build_instructions
from backend.training.dataset import batches, distil
from tests.helpers.tiny import tiny_instructions

LAYERS = (2, 4)


def test_corpus_is_deterministic_held_out_and_split():
    first, second = build_instructions(), build_instructions()
    assert first == second and len(first) > 500
    sources = {i.source.split(":")[0] for i in first}
    assert sources == {"doc", "code", "chat"}
    validation = [i for i in first if i.split == "validation"]
    assert 0.04 < len(validation) / len(first) < 0.15


def test_distilled_answers_are_the_targets_greedy_output_with_its_hidden_states(tiny, tmp_path):
    instructions = tiny_instructions()
    data = distil(tiny, instructions, LAYERS, "train", max_new_tokens=10, batch_size=4, cache_root=tmp_path)
    from safetensors.torch import load_file

    shard = load_file(str(data.shards()[0]))
    starts = shard["starts"].tolist()
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, 512)
    prompts = [encode_conversation(tiny.tokenizer, [i.text], []) for i in instructions if i.split == "train"]
    for number in range(3):  # instructions are distilled in a shuffled order: find each sequence's prompt
        sequence = shard["input_ids"][starts[number] : starts[number + 1]]
        prompt = max((p for p in prompts if sequence.tolist()[: len(p)] == p), key=len)
        answer = engine.generate(prompt, None, GenerationSettings(10, draft_len=0)).run().output_ids
        assert sequence.tolist() == prompt + answer
        mask = shard["loss_mask"][starts[number] : starts[number + 1]]
        assert mask.sum() == len(answer) and bool(mask[len(prompt) - 1]) and not bool(mask[-1])
        with torch.inference_mode():
            fresh = tiny.model(sequence[None], output_hidden_states=True).hidden_states
        for layer in LAYERS:
            cached = shard[f"hidden.{layer}"][starts[number] : starts[number + 1]].float()
            assert torch.allclose(cached, fresh[layer][0], atol=2e-3)  # stored in fp16
    assert data.tokens() == starts[-1]


def test_distillation_resumes_and_respects_the_budget(tiny, tmp_path):
    instructions = tiny_instructions(80)
    first = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path, token_budget=10)
    assert len(first.shards()) == 1  # one shard of 32 sequences passes a 10-token budget
    tokens_at_first = first.tokens()
    again = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    assert len(again.shards()) > 1 and again.tokens() > tokens_at_first
    done = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    assert done.shards() == again.shards()  # nothing left to do


def test_batches_are_windows_with_masks_and_hidden_states(tiny, tmp_path):
    data = distil(tiny, tiny_instructions(), LAYERS, "train", max_new_tokens=10, cache_root=tmp_path)
    batch = next(batches(data, window=8, rows=3, device=torch.device("cpu"), dtype=torch.float32))
    assert batch.input_ids.shape == (3, 8) and batch.loss_mask.shape == (3, 8)
    assert set(batch.hidden) == set(LAYERS) and batch.hidden[2].shape == (3, 8, 64)
    assert not batch.loss_mask[:, -1].any()
    seen = sum(1 for _ in batches(data, window=8, rows=3, device=torch.device("cpu"), dtype=torch.float32, epochs=1))
    assert seen >= 2
