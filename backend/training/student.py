"""The distilled draft model (kind `draft-model`): a small student sharing the target's tokenizer, trained
to match the target's next-token distribution on the self-distillation data, so the external-draft path
(drafters/draft_model.py) runs a real pair. StudentConfig chooses one of two designs.

Sizing: a shipped drafter must fit 20 MB, and SmolLM2's 49152 x 576 embedding alone is 56 MB in fp16.

- Own embedding (the default): a narrow Llama (128 wide by default) storing its own tied embedding, saved as
  an ordinary Hugging Face folder with the target's tokenizer (3.5 MB for SmolLM2; 6 layers: 15.4 MB of
  weights). Its embedding starts as the target's projected onto the target embedding's top principal
  directions (E_t = U S V^T, E_s = E_t V_k: the best rank-k fit of the target's token geometry); its layers
  start fresh.
- Shared embedding (`share_target_embedding`): the target's own architecture at the target's full width
  (hidden size, heads, head size and MLP width all the target's), `num_layers` deep (default 2). Its layers
  start as copies of the target's `init_layers` (default: the first num_layers - 1 layers and the last,
  so the first and the last for two), its final norm as the target's. The default keeps the layer that
  reads out into the LM head: in a rough check on SmolLM2 (30 steps of 256 tokens of Python source, KL on
  512 held-out tokens) pairs with layer 29 learnt fastest, (0, 29) 2.9 and (28, 29) 3.1 nats against
  4.3 for (0, 1), 4.4 for (0, 15) and 4.7 for (0, 28), though (0, 29) starts furthest off (53 nats).
  The embedding, LM head and tokenizer are the target's own modules, frozen, borrowed at load time and
  never stored (drafters/shared_student.py), so the folder holds the layers and the norm only:
  num_layers * (2 H d (n_q + n_kv) + 3 H I + 2 H) + H weights in fp16. For SmolLM2 (H 576, d 64, 9 + 3
  heads, I 1536) a layer is 3.54 M weights, and two layers with the norm are 7.08 M = 14.2 MB. The target's
  whole LM head (28 M weights for SmolLM2) would be most of a draft step's cost, so the student drafts over
  `draft_vocab_size` target tokens (default 8192), the most frequent in the training answers, written to its
  folder as the trained heads' `vocab_map.safetensors` (shared_student.DraftVocabularyHead); it still learns
  the whole distribution. On a 2-core AMD EPYC without AVX-512, a compiled draft step of SmolLM2's
  two-layer student took 8.1 ms with the whole head and 3.1 ms with 6144 rows (a one-token target pass 37 ms).

Knows nothing about the engine or the data; the training loop drives it through the TrainableKind interface
(loop.py), like every trained kind.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters import DISTILLED_DRAFT as KIND
from backend.drafters import STUDENT_MARKER as MARKER
from backend.drafters.draft_model import DraftModelDrafter
from backend.drafters.head_io import (
    DEFAULT_DRAFT_VOCAB,
    WEIGHTS_FILE,
    check_trained_for,
    checked_settings,
    draft_vocabulary,
    read_vocabulary,
    target_record,
    write_vocabulary,
)
from backend.drafters.shared_student import (
    SHARED_PARTS,
    SHARES_TARGET,
    drafting_student,
    share_target_parts,
    student_record,
)
from backend.drafters.trained import DrafterWeightsError, TargetParts, TrainBatch, teacher_logits

FEATURE_NOISE = False  # a language model of its own, not a FeatureHead: train --feature-noise is refused
SHARED_LAYERS = 2  # a shared-embedding student's default depth
DRAFT_VOCABULARY = "draft_vocabulary"  # the buffer holding a shared-embedding student's d2t [Vd]
TARGET_SHAPE = ("hidden_size", "num_heads", "num_kv_heads", "intermediate_size")  # the target's, when shared


@dataclass(frozen=True)
class StudentConfig:
    """The own-embedding student's shape; with share_target_embedding, the shape fields hold the target's
    and each of the num_layers layers starts as the target layer init_layers names (HF layer index)."""

    hidden_size: int = 128
    num_layers: int = 6
    num_heads: int = 4  # head size hidden_size / num_heads
    num_kv_heads: int = 1
    intermediate_size: int = 512
    share_target_embedding: bool = False
    init_layers: tuple[int, ...] = ()
    draft_vocab_size: int | None = None  # a shared-embedding student's draft vocabulary (None: the whole one)

    def __post_init__(self) -> None:
        if not self.share_target_embedding and (
            self.hidden_size % self.num_heads
            or self.num_heads % self.num_kv_heads
            or (self.hidden_size // self.num_heads) % 2
        ):
            raise SpecScopeError(
                f"student shape {asdict(self)}: hidden_size must split into num_heads even-sized "
                "heads, and num_heads into num_kv_heads groups"
            )

    @classmethod
    def for_target(cls, text, settings: dict | None = None) -> StudentConfig:
        """The shape `settings` ask for, given the target's text config `text` (the shared design's source)."""
        settings = checked_settings(cls, KIND, dict(settings or {}))
        if not settings.get("share_target_embedding"):
            for only_shared in ("init_layers", "draft_vocab_size"):
                if settings.get(only_shared):
                    raise SpecScopeError(
                        f"{only_shared} is for a shared-embedding student only: add share_target_embedding"
                    )
            return cls(**settings)
        given = [key for key in TARGET_SHAPE if key in settings]
        if given:
            raise SpecScopeError(
                f"a student sharing the target's embedding is as wide as the target: leave out {', '.join(given)}"
            )
        depth, total = settings.get("num_layers", SHARED_LAYERS), text.num_hidden_layers
        init = tuple(settings.get("init_layers") or (*range(depth - 1), total - 1))
        if depth < 1 or len(init) != depth or not all(0 <= layer < total for layer in init):
            raise SpecScopeError(
                f"init_layers {list(init)} must name one target layer (0..{total - 1}) for each of the "
                f"student's {depth} layers"
            )
        heads = text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        vocabulary = settings.get("draft_vocab_size", min(DEFAULT_DRAFT_VOCAB, text.vocab_size))
        if not 1 <= vocabulary <= text.vocab_size:
            raise SpecScopeError(f"draft_vocab_size must be 1..{text.vocab_size}, got {vocabulary}")
        return cls(text.hidden_size, depth, heads, kv_heads, text.intermediate_size, True, init, vocabulary)


def new_head(
    target: LoadedModel, settings: dict | None = None, token_counts: torch.Tensor | None = None
) -> PreTrainedModel:
    """A fresh student for `target` of StudentConfig's shape (`settings`), on the target's device and dtype,
    with its vocabulary, special tokens and generation config. A shared-embedding student drafts over the
    draft_vocab_size tokens most frequent in `token_counts` [V] (kept as its DRAFT_VOCABULARY buffer, d2t);
    without counts, or at the whole vocabulary's size, over every token, as the own-embedding student does."""
    text = target.model.config.get_text_config(decoder=True)
    shape = StudentConfig.for_target(text, settings)
    student = _shared_student(target, shape) if shape.share_target_embedding else _own_student(target, shape, text)
    if shape.share_target_embedding and token_counts is not None and shape.draft_vocab_size < text.vocab_size:
        d2t = draft_vocabulary(token_counts, shape.draft_vocab_size).to(target.device)  # [Vd]
        student.register_buffer(DRAFT_VOCABULARY, d2t, persistent=False)  # not in its state dict or checkpoint
    student.generation_config = copy.deepcopy(target.model.generation_config)
    student.config.update({MARKER: {"kind": KIND, "settings": asdict(shape)}})
    return student


def _own_student(target: LoadedModel, shape: StudentConfig, text) -> LlamaForCausalLM:
    """A narrow Llama with its own tied embedding, initialised from the target's principal directions."""
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
    return student.to(target.device, target.dtype)


def _shared_student(target: LoadedModel, shape: StudentConfig) -> PreTrainedModel:
    """The target's architecture, shape.num_layers deep, its layers and final norm copied from the target's,
    its embedding and LM head the target's own (share_target_parts)."""
    parts = TargetParts.of(target)
    config = copy.deepcopy(parts.config)
    config.num_hidden_layers = shape.num_layers
    if getattr(config, "layer_types", None):  # per-layer attention kinds (sliding, full) follow the copied layers
        config.layer_types = [config.layer_types[layer] for layer in shape.init_layers]
    student = AutoModelForCausalLM.from_config(config)
    decoder, source = student.get_decoder(), target.model.get_decoder()
    for own, taken in zip(decoder.layers, shape.init_layers, strict=True):
        own.load_state_dict(source.layers[taken].state_dict())
    decoder.norm.load_state_dict(parts.norm.state_dict())
    return share_target_parts(student.to(target.device, target.dtype), target)


def training_loss(student: LlamaForCausalLM, parts: TargetParts, batch: TrainBatch) -> tuple[torch.Tensor, dict]:
    """KL(p_target || p_student) at the answer positions: sum_v p_t(v) (log p_t(v) - log p_s(v)), where p_t is
    the target's distribution read from its cached final hidden state (lm_head(h_L))."""
    mask = batch.loss_mask  # [B, T]
    logits = student(input_ids=batch.input_ids).logits[mask].float()  # [N, V]
    with torch.no_grad():
        target_log_probs = torch.log_softmax(teacher_logits(parts, batch.hidden[parts.num_layers][mask]), -1)  # [N, V]
    log_probs = torch.log_softmax(logits, dim=-1)  # [N, V]
    kl = (target_log_probs.exp() * (target_log_probs - log_probs)).sum(-1).mean()
    top1 = (log_probs.argmax(-1) == target_log_probs.argmax(-1)).float().mean()
    return kl, {"top1": float(top1)}


def drafter(target: LoadedModel, student: LlamaForCausalLM) -> DraftModelDrafter:
    """The external-draft drafter around a student still in memory (validation during training), drafting as
    its saved folder will: over its draft vocabulary, if it has one (a copy of its own tensors then)."""
    d2t = getattr(student, DRAFT_VOCABULARY, None)
    if d2t is not None:
        student = drafting_student(student.config, student.state_dict(), target, d2t)
    draft = LoadedModel("(student in training)", "memory", "", student, target.tokenizer, target.device, target.dtype)
    return DraftModelDrafter(target, draft)


def save(student: PreTrainedModel, target: LoadedModel, out: Path) -> Path:
    """A Hugging Face folder (config, fp16 safetensors, generation config) whose config.json records, under
    MARKER, the kind, the shape and the target it was distilled from. The own-embedding student's is an
    ordinary model with the target's tokenizer; the shared-embedding student's holds its own tensors only
    and no tokenizer, its record listing the parts it borrows from that very target (shared_student.py), and
    its draft vocabulary (head_io.write_vocabulary) when it has one."""
    record = {**getattr(student.config, MARKER), "target": target_record(target)}
    out.mkdir(parents=True, exist_ok=True)
    if not record["settings"].get("share_target_embedding"):
        stored = copy.deepcopy(student).to("cpu", torch.float16)
        stored.config.update({MARKER: record})
        stored.save_pretrained(out)
        target.tokenizer.save_pretrained(out)
        return out
    config = copy.deepcopy(student.config)
    config.update({MARKER: {**record, SHARES_TARGET: list(SHARED_PARTS)}})
    config.architectures, config.dtype = [type(student).__name__], torch.float16
    config.save_pretrained(out)
    student.generation_config.save_pretrained(out)
    own = {name: tensor.detach().to("cpu", torch.float16).contiguous() for name, tensor in student.state_dict().items()}
    save_file(own, str(out / WEIGHTS_FILE), metadata={"format": "pt"})  # the borrowed tensors are left out
    d2t = getattr(student, DRAFT_VOCABULARY, None)
    if d2t is not None:
        write_vocabulary(out, d2t)
    return out


def load_trained(target: LoadedModel, folder: Path) -> tuple[PreTrainedModel, dict]:
    """(the student `save` wrote into folder, either design, with its weights and draft vocabulary, in train
    mode; the shape settings it was built with); a DrafterWeightsError sentence when folder holds none for
    `target`."""
    folder = Path(folder).expanduser()
    record = student_record(folder) or {}
    if record.get("kind") != KIND:
        raise DrafterWeightsError(f"{folder} holds no {KIND} student (its config.json does not record one)")
    check_trained_for(folder, record.get("target") or {}, target)
    shared = bool(record["settings"].get("share_target_embedding"))
    settings = {key: value for key, value in record["settings"].items() if not (shared and key in TARGET_SHAPE)}
    try:
        student = new_head(target, settings)
        if shared:
            student.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))  # its own tensors; the borrowed are not
            d2t = read_vocabulary(folder, target.facts.vocab_size)
            if d2t is not None:
                student.register_buffer(DRAFT_VOCABULARY, d2t.to(target.device), persistent=False)
        else:
            student.load_state_dict(AutoModelForCausalLM.from_pretrained(folder).state_dict())
    except (OSError, ValueError, RuntimeError, SpecScopeError) as error:
        reason = str(error).strip().splitlines()[0]
        raise DrafterWeightsError(f"{folder} does not hold a student to train further: {reason}") from error
    return student.train(), settings


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """The student learns from the target's final hidden state only (the soft targets), whatever its shape."""
    return (target.facts.num_layers,)
