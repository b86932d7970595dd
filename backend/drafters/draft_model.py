"""External draft model: a separate small causal LM sharing the target's tokenizer, drafting D tokens
with D sequential forward passes over its own KV cache (Leviathan et al.; HF `assistant_model`;
vLLM `draft_model`). Probabilities are returned, so sampling verification uses the real q. Asked for a
token tree, it adds each depth's next-best tokens beside its greedy chain (autoregressive.py).

A distilled student that shares the target's embedding and LM head is loaded by shared_student.py, with
those parts taken from the target. Knows nothing about the target except its vocabulary size and cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.core.drafter import DrafterCost
from backend.core.errors import SpecScopeError
from backend.core.kv import ForwardResult
from backend.core.models import LoadedModel, check_same_tokenizer, matmul_weights
from backend.core.target_passes import compile_mode, target_passes
from backend.drafters.autoregressive import AutoregressiveSession
from backend.drafters.engine_settings import trtllm_schedule_argument
from backend.drafters.head_precision import student_dtype
from backend.drafters.shared_student import hold_student_in, load_student, shares_target
from backend.drafters.shipped import DISTILLED_DRAFT, trained_folders
from backend.drafters.spec import DrafterSpec, HeadOptions, LoadModel, option


class DraftModelRunner:
    """The draft's passes take the target's path (`compile`): a compiled draft over a static cache
    where the target's passes are compiled and the draft's architecture allows it."""

    def __init__(self, draft: LoadedModel, vocab_size: int, compile: str = "off") -> None:
        """compile: the target's resolved mode, "on" or "off"."""
        self.draft = draft
        self.vocab_size = vocab_size
        self.passes = target_passes(draft.model, "auto" if compile == "on" else "off")
        self.passes.warm_up()  # compiled here, so no request's draft time pays for it

    def new_cache(self):
        return self.passes.new_cache(0)

    def forward(self, tokens: list[int], cache) -> ForwardResult:
        return self.passes.forward(tokens, cache, want_hidden=False, last_only=True)

    def keep(self, cache, keep: int) -> None:
        self.passes.keep(cache, keep)


class DraftModelDrafter:
    name = "draft-model"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, target: LoadedModel, draft: LoadedModel) -> None:
        check_same_tokenizer(target, draft)
        self.target = target
        self.draft = draft
        self.runner = DraftModelRunner(draft, target.facts.vocab_size, compile_mode(target.model, target.compile))

    def cost(self) -> DrafterCost:
        return DrafterCost(matmul_weights(self.draft.model) / self.target.layer_weights, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> AutoregressiveSession:
        return AutoregressiveSession(self.runner, self.target.eos_token_ids)


@dataclass(frozen=True)
class DraftModelOptions(HeadOptions):
    """A draft model by spec, else a distilled student's folder (`drafter_path`, as the trained heads take it),
    which holds its own layers in `head_precision` as the heads do; any other draft model runs in the target's
    dtype (it may be shared with other requests, and its weights were not saved with float16 in mind)."""

    draft_model: str | None = option(
        None,
        "the draft's model spec: a Hugging Face id, a folder or a .gguf file "
        "sharing the target's tokenizer (default: the student distilled for "
        "the target under data/drafters/)",
        label="draft model",
    )


def _build(target: LoadedModel, options: DraftModelOptions, load: LoadModel) -> DraftModelDrafter:
    dtype = student_dtype(options.head_precision, target)  # a wrong choice fails before any loading
    spec = options.draft_model or options.drafter_path or trained_folders(target).get(DISTILLED_DRAFT)
    if not spec:
        raise SpecScopeError(
            "the draft-model drafter needs a draft model: pass --draft-model SPEC (a Hugging "
            "Face id, a folder or a .gguf file sharing the target's tokenizer), or distil one "
            f"with `python -m backend train --kind draft-model --target {target.spec} --out "
            "data/drafters/draft-model-NAME`"
        )
    if shares_target(spec):  # a student that borrows the target's embedding, LM head and tokenizer
        student = load_student(spec, target)
        hold_student_in(student.model, dtype)
        return DraftModelDrafter(target, student)
    draft = load(str(spec), device=str(target.device), dtype=str(target.dtype).removeprefix("torch."))
    return DraftModelDrafter(target, draft)


def _export(draft_len: int, schedule: dict[int, int], options: DraftModelOptions) -> dict[str, object]:
    return {
        "vllm": {"method": "draft_model", "model": "<draft model id or path>", "num_speculative_tokens": draft_len},
        "sglang": f"--speculative-algorithm STANDALONE --speculative-draft-model-path <draft> "
        f"--speculative-num-steps {draft_len} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {draft_len + 1}",
        "tensorrt_llm": f"DraftTargetDecodingConfig(max_draft_len={draft_len}, "
        f"speculative_model='<draft model id or path>'{trtllm_schedule_argument(schedule)})",
    }


SPEC = DrafterSpec(
    "draft-model",
    "an external small model sharing the target's tokenizer drafts autoregressively",
    DraftModelOptions,
    _build,
    export=_export,
    trees=True,
)
