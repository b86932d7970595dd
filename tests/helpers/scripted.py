"""A drafter that proposes the true greedy continuation with a wrong token at a chosen position (so each
step accepts exactly the scripted count), and Hugging Face's greedy decoding as the reference."""

from __future__ import annotations

import torch

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome

# a prompt with repeats, so lookup drafters find matches from the first step
PROMPT = [5, 9, 13, 22, 5, 9, 13, 40, 41, 5, 9, 13, 22, 7, 8]


@torch.inference_mode()
def hf_greedy(model, prompt, max_new_tokens):
    inputs = torch.tensor([prompt])
    out = model.model.generate(
        inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=1
    )
    return out[0, len(prompt) :].tolist()


class ScriptedDrafter:
    """Proposes the true greedy continuation with a wrong token at a chosen position, so each step
    accepts exactly the scripted count (0..D) and the cache must be trimmed accordingly."""

    name = "scripted"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, reference: list[int], prompt_len: int, accept_counts: list[int]) -> None:
        self.reference, self.prompt_len, self.accept_counts = reference, prompt_len, accept_counts

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        return self

    def propose(self, request: DraftRequest) -> Draft:
        if not self.accept_counts:
            return Draft([])
        position = len(request.tokens) - self.prompt_len
        accept = self.accept_counts.pop(0)
        truth = self.reference[position : position + request.max_tokens]
        wrong = [(t + 1) % 60 + 4 for t in truth]
        return Draft(truth[:accept] + wrong[accept:])

    def observe(self, outcome: StepOutcome) -> None:
        pass

    def close(self) -> None:
        pass
