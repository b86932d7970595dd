"""The distilled draft model (kind `draft-model`): a small Llama student that shares the target's tokenizer,
trained to match the target's next-token distribution on the self-distillation data, and saved as an
ordinary Hugging Face model folder, so the external-draft path (drafters/draft_model.py) runs a real pair.

Sizing: a shipped drafter must fit 20 MB with its tokenizer (3.5 MB for SmolLM2). SmolLM2's 49152 x 576
embedding alone is 56 MB in fp16, so the student is narrower (128 wide by default) and cannot take the
target's layers as they are. Its tied embedding starts as the target's projected onto the target
embedding's top principal directions (E_t = U S V^T, E_s = E_t V_k: the best rank-k fit of the target's
token geometry); its layers start fresh.

Knows nothing about the engine or the data; the training loop drives it through the TrainableKind interface
(loop.py), like every trained kind.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters import DISTILLED_DRAFT as KIND
from backend.drafters import STUDENT_MARKER as MARKER
from backend.drafters.draft_model import DraftModelDrafter
from backend.drafters.trained import TargetParts, TrainBatch


@dataclass(frozen=True)
class StudentConfig:
    hidden_size: int = 128
    num_layers: int = 6
    num_heads: int = 4  # head size hidden_size / num_heads
    num_kv_heads: int = 1
    intermediate_size: int = 512

    def __post_init__(self) -> None:
        if (
            self.hidden_size % self.num_heads
            or self.num_heads % self.num_kv_heads
            or (self.hidden_size // self.num_heads) % 2
        ):
            raise SpecScopeError(
                f"student shape {asdict(self)}: hidden_size must split into num_heads even-sized "
                "heads, and num_heads into num_kv_heads groups"
            )


def new_head(
    target: LoadedModel, settings: dict | None = None, token_counts: torch.Tensor | None = None
) -> LlamaForCausalLM:
    """A fresh student for `target`: its vocabulary, special tokens and RoPE base, StudentConfig's shape
    (`settings`), the embedding initialised from the target's principal directions. A student scores the
    whole vocabulary, so `token_counts` (which choose the other kinds' reduced vocabularies) do not apply."""
    shape = StudentConfig(**(settings or {}))
    text = target.model.config.get_text_config(decoder=True)
    rope_theta = (getattr(text, "rope_parameters", None) or {}).get("rope_theta") or getattr(text, "rope_theta", 1e4)
    config = LlamaConfig(
        vocab_size=text.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.hidden_size // shape.num_heads,
        max_position_embeddings=target.facts.max_context,
        rms_norm_eps=text.rms_norm_eps,
        rope_theta=rope_theta,
        tie_word_embeddings=True,
        bos_token_id=text.bos_token_id,
        eos_token_id=text.eos_token_id,
        pad_token_id=getattr(text, "pad_token_id", None),
    )
    student = LlamaForCausalLM(config)
    with torch.no_grad():
        embedding = target.model.get_input_embeddings().weight.detach().float().cpu()  # [V, H]
        _, _, right = torch.linalg.svd(embedding, full_matrices=False)  # right: [H, H], rows by singular value
        projected = embedding @ right[: shape.hidden_size].T  # [V, min(k, H)]
        student.get_input_embeddings().weight.zero_()[:, : projected.shape[1]] = projected  # [V, k]
    student.generation_config = copy.deepcopy(target.model.generation_config)
    student.config.update({MARKER: {"kind": KIND, "settings": asdict(shape)}})
    return student.to(target.device, target.dtype)


def training_loss(student: LlamaForCausalLM, parts: TargetParts, batch: TrainBatch) -> tuple[torch.Tensor, dict]:
    """KL(p_target || p_student) at the answer positions: sum_v p_t(v) (log p_t(v) - log p_s(v)), where p_t is
    the target's distribution read from its cached final hidden state (lm_head(h_L))."""
    mask = batch.loss_mask  # [B, T]
    logits = student(input_ids=batch.input_ids).logits[mask].float()  # [N, V]
    with torch.no_grad():
        target_log_probs = torch.log_softmax(parts.lm_head(batch.hidden[parts.num_layers][mask]).float(), -1)  # [N, V]
    log_probs = torch.log_softmax(logits, dim=-1)  # [N, V]
    kl = (target_log_probs.exp() * (target_log_probs - log_probs)).sum(-1).mean()
    top1 = (log_probs.argmax(-1) == target_log_probs.argmax(-1)).float().mean()
    return kl, {"top1": float(top1)}


def drafter(target: LoadedModel, student: LlamaForCausalLM) -> DraftModelDrafter:
    """The external-draft drafter around a student still in memory (validation during training)."""
    draft = LoadedModel("(student in training)", "memory", "", student, target.tokenizer, target.device, target.dtype)
    return DraftModelDrafter(target, draft)


def save(student: LlamaForCausalLM, target: LoadedModel, out: Path) -> None:
    """An ordinary Hugging Face folder (config, fp16 safetensors, generation config, the target's tokenizer);
    config.json also records, under MARKER, the kind, the shape and the target it was distilled from."""
    facts = target.facts
    stored = copy.deepcopy(student).to("cpu", torch.float16)
    stored.config.update(
        {
            MARKER: {
                **getattr(student.config, MARKER),
                "target": {
                    "spec": target.spec,
                    "fingerprint": target.fingerprint,
                    "vocab_size": facts.vocab_size,
                    "hidden_size": facts.hidden_size,
                    "num_layers": facts.num_layers,
                },
            }
        }
    )
    out.mkdir(parents=True, exist_ok=True)
    stored.save_pretrained(out)
    target.tokenizer.save_pretrained(out)


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """The student learns from the target's final hidden state only (the soft targets), whatever its shape."""
    return (target.facts.num_layers,)
