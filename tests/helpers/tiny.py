"""Tiny random Llama models with a word-level tokenizer, built from a config in milliseconds, so the
engine, drafters and CLI can be tested without weights from anywhere.

The vocabulary is `<unk> <eos> <user> <bot> w4 .. w{V-1}`; prompts are written as "w5 w9 w5 ...".
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from backend.core.models import LoadedModel

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<user>' if m['role'] == 'user' else '<bot>' }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<bot>{% endif %}"
)
EOS_ID = 1


def tiny_tokenizer(vocab_size: int = 64, first_word: int = 4) -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<eos>": 1, "<user>": 2, "<bot>": 3}
    vocab.update({f"w{i}": i for i in range(first_word, vocab_size)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>", pad_token="<eos>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_llama(
    seed: int = 0,
    vocab_size: int = 64,
    layers: int = 4,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    init_scale: float = 0.1,
    tokenizer: PreTrainedTokenizerFast | None = None,
    max_context: int = 512,
    intermediate: int | None = None,
) -> LoadedModel:
    """A random Llama. `init_scale` 0.1 (the usual is 0.02) makes its logits peaked enough that greedy
    choices are not decided by float rounding, and its greedy text repetitive, as small LMs' is."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_context,
        initializer_range=init_scale,
        eos_token_id=EOS_ID,
        bos_token_id=None,
        pad_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.pad_token_id = EOS_ID
    tokenizer = tokenizer or tiny_tokenizer(vocab_size)
    return LoadedModel(f"tiny-{seed}", "memory", f"seed{seed}", model, tokenizer, torch.device("cpu"), torch.float32)


def save_tiny(model: LoadedModel, folder: Path) -> Path:
    model.model.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    return folder


def words(*ids: int) -> str:
    return " ".join(f"w{i}" for i in ids)


def tiny_instructions(count: int = 24):
    """Training instructions in the tiny vocabulary (for the self-distillation pipeline's tests)."""
    from backend.training.corpus import Instruction

    return [
        Instruction(f"t{i}", "test", " ".join(f"w{(i * 3 + j) % 40 + 5}" for j in range(6 + i % 5)))
        for i in range(count)
    ]
