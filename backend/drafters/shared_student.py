"""A distilled student that shares its target's token embedding, LM head and tokenizer (the wide design of
training/student.py): how those frozen target modules are put into the student and kept out of its state
dict, and how its folder is read back for the one target it was distilled from.

The folder is Hugging Face-style (config.json, generation_config.json, model.safetensors) but holds only
the student's own tensors: its decoder layers and final norm. No embedding, no LM head, no tokenizer files;
config.json's STUDENT_MARKER record lists what it borrows (`shares_target`) and the target it needs (its
fingerprint, vocabulary and hidden sizes), and loading fills the shared parts from the target given then.
Plain `from_pretrained` on such a folder would build random embeddings: it is not a standalone model.
A folder may also hold `vocab_map.safetensors` (`d2t`, as the trained heads' folders do): the student then
drafts over those target tokens only (DraftVocabularyHead), which on a CPU makes a draft step several times
cheaper, since the LM head is most of a two-layer student's weights.

Knows nothing about training or the engine; the draft-model drafter (draft_model.py) loads these folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedConfig, PreTrainedModel

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, file_sha256
from backend.drafters.head_io import CONFIG_FILE, WEIGHTS_FILE, check_trained_for, read_vocabulary
from backend.drafters.head_precision import NarrowLinear, replace_linears
from backend.drafters.shipped import STUDENT_MARKER
from backend.drafters.trained import DrafterWeightsError, TargetParts

SHARES_TARGET = "shares_target"  # the record's key listing what the student borrows from its target
SHARED_PARTS = ("embedding", "lm_head", "tokenizer")


def student_record(spec: str | Path) -> dict | None:
    """The STUDENT_MARKER record of a model folder's config.json; None for anything else (a hub id, a
    .gguf file, an ordinary model folder)."""
    config = Path(str(spec)).expanduser() / CONFIG_FILE
    if not config.is_file():
        return None
    try:
        record = json.loads(config.read_text()).get(STUDENT_MARKER)
    except (ValueError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


def shares_target(spec: str | Path) -> bool:
    """Is `spec` the folder of a student that borrows its target's embedding, LM head and tokenizer?"""
    return bool((student_record(spec) or {}).get(SHARES_TARGET))


def share_target_parts(student: PreTrainedModel, target: LoadedModel) -> PreTrainedModel:
    """Put the target's own embedding and LM head modules (frozen, not copies) into `student`, and leave them
    out of its state_dict() and load_state_dict(). A one-sentence error when the sizes differ."""
    parts = TargetParts.of(target)
    config = student.config.get_text_config(decoder=True)
    if (config.vocab_size, config.hidden_size) != (parts.vocab_size, parts.hidden_size):
        raise SpecScopeError(
            f"a student of vocabulary {config.vocab_size} and width {config.hidden_size} cannot share the embedding "
            f"of '{target.spec}' (vocabulary {parts.vocab_size}, hidden size {parts.hidden_size})"
        )
    shared = [*parts.embed.parameters(), *parts.lm_head.parameters()]
    for parameter in shared:
        parameter.requires_grad_(False)
    student.set_input_embeddings(parts.embed)
    student.set_output_embeddings(parts.lm_head)
    names = {name for name, p in student.named_parameters(remove_duplicate=False) if any(p is s for s in shared)}

    def leave_out(module, state: dict, prefix: str, metadata) -> None:  # saved without the borrowed tensors
        for name in names:
            state.pop(prefix + name, None)

    def forgive(module, incompatible) -> None:  # and loaded without them
        incompatible.missing_keys[:] = [key for key in incompatible.missing_keys if key not in names]

    student.register_state_dict_post_hook(leave_out)
    student.register_load_state_dict_post_hook(forgive)
    return student


class DraftVocabularyHead(NarrowLinear):
    """The target's LM head scoring only the draft vocabulary d2t [Vd] (the target tokens most frequent in
    the training answers, EAGLE-3's reduced vocabulary): its rows are frozen copies of those target rows, and
    its logits come back over the whole vocabulary, -inf outside d2t, so the drafting code keeps indexing
    target token ids. A greedy draft changes only where the whole head's argmax lies outside d2t. Its rows
    may be held in a narrower dtype than the hidden states (hold_student_in)."""

    def __init__(self, lm_head: nn.Linear, d2t: torch.Tensor) -> None:
        weight = lm_head.weight.detach()  # [V, H]
        super().__init__(weight.shape[1], d2t.numel(), lm_head.bias is not None, weight.device, weight.dtype)
        index = d2t.to(weight.device, torch.long)  # [Vd]
        self.weight = nn.Parameter(weight[index].clone(), requires_grad=False)  # [Vd, H]
        if lm_head.bias is not None:
            self.bias = nn.Parameter(lm_head.bias.detach()[index].clone(), requires_grad=False)  # [Vd]
        self.register_buffer("d2t", index, persistent=False)
        self.vocab_size = weight.shape[0]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        scores = super().forward(hidden)  # [..., Vd]
        logits = scores.new_full((*scores.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
        return logits.index_copy(-1, self.d2t, scores)


def drafting_student(
    config: PreTrainedConfig, own_tensors: dict[str, torch.Tensor], target: LoadedModel, d2t: torch.Tensor | None
) -> PreTrainedModel:
    """A student of `config` holding `own_tensors` (its layers and norm) and `target`'s embedding and LM head,
    restricted to the draft vocabulary d2t when one is given, on the target's device and dtype, in eval mode:
    how a student drafts, whether read from its folder or taken from a training run."""
    student = AutoModelForCausalLM.from_config(config)
    student = share_target_parts(student.to(target.device, target.dtype), target)
    student.load_state_dict(own_tensors)
    if d2t is not None:
        student.set_output_embeddings(DraftVocabularyHead(TargetParts.of(target).lm_head, d2t))
    return student.eval()


def hold_student_in(student: PreTrainedModel, dtype: torch.dtype) -> None:
    """Hold the student's own weights in `dtype` while it drafts (head_precision.py): each decoder layer's
    linears become NarrowLinear copies and a draft vocabulary's rows move; the target's borrowed embedding
    and LM head stay as they are, and nothing changes where the weights are in `dtype` already."""
    replace_linears(student.get_decoder().layers, dtype, NarrowLinear)
    head = student.get_output_embeddings()
    if isinstance(head, DraftVocabularyHead):
        head.hold_in(dtype)


def load_student(folder: str | Path, target: LoadedModel) -> LoadedModel:
    """The student of `folder` with `target`'s embedding, LM head and tokenizer, on the target's device and
    dtype; a DrafterWeightsError in one sentence when the folder was distilled from another target."""
    folder = Path(folder).expanduser()
    record = student_record(folder) or {}
    trained_for = record.get("target") or {}
    check_trained_for(folder, trained_for, target)
    if not trained_for.get("fingerprint"):
        raise DrafterWeightsError(f"{folder} does not record the fingerprint of the target whose embedding it shares")
    d2t = read_vocabulary(folder, TargetParts.of(target).vocab_size)
    try:
        own_tensors = load_file(str(folder / WEIGHTS_FILE))
        student = drafting_student(AutoConfig.from_pretrained(folder), own_tensors, target, d2t)
    except (OSError, ValueError, RuntimeError, SpecScopeError) as error:
        reason = str(error).strip().splitlines()[0]
        raise DrafterWeightsError(f"{folder} does not hold a usable student for '{target.spec}': {reason}") from error
    if (folder / "generation_config.json").is_file():
        student.generation_config = GenerationConfig.from_pretrained(folder)
    fingerprint = file_sha256(folder / CONFIG_FILE)
    return LoadedModel(str(folder), str(folder), fingerprint, student, target.tokenizer, target.device, target.dtype)
