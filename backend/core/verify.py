"""The acceptance maths of speculative decoding, as pure functions on tensors.

Notation (Leviathan et al. 2023, Chen et al. 2023): the target scored `[x, d_1 .. d_D]` in one pass,
giving distributions p_0 .. p_D, where p_{i-1} is the target's distribution for the slot d_i fills
and p_D the one after the last draft. q_i is the draft's distribution when it proposed d_i.

Both rules keep the output distribution exactly the target's: greedy acceptance reproduces greedy
decoding token for token, and rejection sampling reproduces sampling from p. `verify` is the one entry
point the engine and the batch call; it picks replay, greedy or rejection sampling for a step, on a
chain or on a token tree (tree.py: drafts are the tree's nodes n_1 .. n_N, p_0 the root's row and
p_n node n's).

Each chain rule tests all D drafts at once on the device and reads the result back in one host sync
(the accepted count and the target's token together), so a step's verification does not wait on the
device once per draft. Tree sampling walks the few nodes on the host after one read of the numbers
the walk needs, then draws the token on the device.

This module knows nothing about models, caches or drafters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from backend.core.errors import SpecScopeError
from backend.core.tree import TreeLayout
from backend.core.tree_shape import children, path_to

MAX_TEMPERATURE = 10.0  # far past where sampling is already close to uniform


@dataclass(frozen=True)
class SamplingParams:
    """How the target turns logits into the next token. temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 keeps every token

    def __post_init__(self) -> None:
        if not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise SpecScopeError(
                f"temperature must be between 0 and {MAX_TEMPERATURE:g} (0 = greedy), got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:
            raise SpecScopeError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SpecScopeError(f"top_k must be >= 0 (0 = off), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Verdict:
    accepted: int  # how many leading drafts the target kept
    token: int  # the target's own token: the bonus when all were kept, else the correction
    # [D+1, V] the processed target distributions rejection sampling used (None for greedy and replay),
    # kept so the display does not compute them again
    probs: torch.Tensor | None = field(default=None, compare=False, repr=False)
    # a tree's kept nodes, root child first (accepted = its length); None for a chain (range(accepted))
    path: tuple[int, ...] | None = None

    def kept_rows(self) -> list[int]:
        """The rows of a pass over [x, d_1 ..] that committed tokens follow: x's (0), then the kept drafts'
        (a chain's first `accepted`, or a tree's path: node i is row i + 1)."""
        if self.path is None:
            return list(range(self.accepted + 1))
        return [0, *(node + 1 for node in self.path)]


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits [n, V] -> probabilities [n, V] after temperature, top-k and top-p (the same processing
    plain sampling uses, so both paths sample from one distribution). Greedy gives one-hot argmax."""
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth_best = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # [n, 1]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # [n, V]
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [n, V]: mass of strictly better tokens
        sorted_probs = sorted_probs.masked_fill(mass_before >= params.top_p, 0.0)  # keeps the top token always
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def verify(
    logits: torch.Tensor,
    drafted: list[int],
    draft_probs: torch.Tensor | None,
    params: SamplingParams,
    replay: list[int] | None = None,
    generator: torch.Generator | None = None,
    tree: TreeLayout | None = None,
) -> Verdict:
    """One step's acceptance: replay against `replay` (the target rollout from here on) when given,
    else greedy acceptance at temperature 0, else rejection sampling with `generator`.

    logits: [D+1, V] the target's raw logits for [x, d_1 .. d_D]; draft_probs: [D, V] q, or None for a
    deterministic drafter. With `tree` (a draft that branches, deterministic) the drafts are its nodes
    and the verdict carries the kept path; chains take the rules below unchanged.
    """
    if replay is not None and tree is not None:
        return replay_tree_verify(replay, drafted, list(tree.parents))
    if replay is not None:
        return replay_verify(replay, drafted)
    drafts = torch.tensor(drafted, dtype=torch.long, device=logits.device)  # [D]
    if params.greedy:
        return greedy_verify(logits, drafts) if tree is None else greedy_tree_verify(logits, drafts, tree)
    if generator is None:
        raise ValueError("rejection sampling needs the request's generator")
    probs = target_probs(logits, params)  # [D+1, V]
    if tree is None:
        return rejection_verify(probs, drafts, draft_probs, generator)
    if draft_probs is not None:
        raise ValueError("tree drafts must be deterministic (no draft distribution) to be sampled losslessly")
    return tree_rejection_verify(probs, drafted, tree, generator)


def greedy_verify(target_logits: torch.Tensor, drafted: torch.Tensor) -> Verdict:
    """Keep drafts while each equals the target's argmax; then emit the target's argmax.

    a = max{k : d_i = argmax p_{i-1} for all i <= k};   token = argmax p_a
    target_logits: [D+1, V]; drafted: [D] long.
    """
    best = target_logits.argmax(dim=-1)  # [D+1]
    matches = (drafted == best[: drafted.shape[0]]).long()  # [D]
    accepted = matches.cumprod(dim=0).sum().view(1)  # [1] a
    accepted_count, token = torch.cat([accepted, best.index_select(0, accepted)]).tolist()
    return Verdict(accepted_count, token)


def greedy_tree_verify(target_logits: torch.Tensor, drafted: torch.Tensor, tree: TreeLayout) -> Verdict:
    """Keep the deepest root path whose every node equals the target's argmax at its parent; then
    emit the target's argmax after that path's last node.

    ok(n) = AND over the path to n of [d_m = argmax p_parent(m)];   path = the deepest ok node's path
    (the first in list order among equally deep ones: distinct siblings leave one ok path, and a
    duplicate sibling is an equally right greedy choice). One host sync, as greedy_verify.
    target_logits: [N+1, V] rows [x, n_1 .. n_N]; drafted: [N] long.
    """
    best = target_logits.argmax(dim=-1)  # [N+1]
    matches = drafted == best.index_select(0, tree.parent_rows)  # [N]
    row_ok = torch.cat([matches.new_ones(1), matches])  # [N+1]: the root always stands
    ok = ~(tree.ancestors & ~row_ok[None, :]).any(dim=-1)  # [N+1]: every row on the path matches
    deepest = torch.where(ok, tree.depths, -1).argmax().view(1)  # [1] row of the deepest ok node
    row, token = torch.cat([deepest, best.index_select(0, deepest)]).tolist()
    path = tuple(path_to(list(tree.parents), row - 1))
    return Verdict(len(path), token, path=path)


def tree_rejection_verify(
    probs: torch.Tensor, drafted: list[int], tree: TreeLayout, generator: torch.Generator
) -> Verdict:
    """Speculative sampling on a token tree of deterministic drafts (q one-hot on each node): SpecInfer's
    multi-step speculative sampling (Miao et al. 2023), as EAGLE's `evaluate_posterior` does it for
    candidates (SafeAILab/EAGLE `eagle/model/utils.py`) with q one-hot.

    Start at the root with r = p_0. Test the node's children in list order: child c is kept when
    u_c * sum(r) < r(d_c), that is with probability r(d_c) / sum(r); a kept child becomes the node, with
    r = p_c; a rejected one leaves r(d_c) = 0 for its next sibling. When every child is rejected, or the
    node has none (the bonus), token ~ norm(r); p_node itself if the rejections removed all its mass
    (a rejection that had probability 0, as rejection_verify falls back).

    Lossless: "keep c with probability r(c) / sum(r), else go on with r without c" gives c exactly its
    share of r and, when it declines, leaves r conditioned on "not c", so over the siblings and the final
    draw the slot's token is distributed as p_node; a kept token's next slot is then its own row's p.
    A duplicate sibling finds r(d) = 0 and is always rejected.

    Draws: node n owns one uniform u_n (N drawn at once; u_n is used only when n is tested, so each test
    has its own), then one `draw` for the token; on a chain these are rejection_verify's draws. The
    walk runs on the host after one read of the numbers it needs: p_parent(n)(d_n) for every node and
    each row's total, in float64 so that sum(r) after removals (the total minus the removed tokens' p)
    keeps float64's precision.

    probs: [N+1, V] the processed target distributions of rows [x, n_1 .. n_N]; drafted: [N] node tokens.
    """
    num_nodes = len(drafted)
    tokens = torch.tensor(drafted, dtype=torch.long, device=probs.device)  # [N]
    p_of_node = probs[tree.parent_rows, tokens].double()  # [N] p_parent(n)(d_n)
    totals = probs.sum(dim=-1, dtype=torch.float64)  # [N+1] sum(p_row)
    uniforms = torch.rand(num_nodes, generator=generator, device=generator.device)  # [N], as rejection_verify draws
    host = torch.cat([p_of_node, totals, uniforms.to(probs.device, torch.float64)]).tolist()  # one host sync
    p_of, totals_of, u_of = host[:num_nodes], host[num_nodes : 2 * num_nodes + 1], host[2 * num_nodes + 1 :]
    below = children(list(tree.parents))
    path: list[int] = []
    removed: set[int] = set()  # the tokens zeroed in r
    row, mass_left = 0, totals_of[0]  # the node's row and sum(r)
    while True:
        kept = None
        for child in below[row]:
            r_child = 0.0 if drafted[child] in removed else p_of[child]  # r(d_c)
            if u_of[child] * mass_left < r_child:
                kept = child
                break
            removed.add(drafted[child])
            mass_left -= r_child
        if kept is None:
            break
        path.append(kept)
        row, mass_left = kept + 1, totals_of[kept + 1]
        removed.clear()
    p_node = probs[row]  # [V]
    residual = p_node.index_fill(0, torch.tensor(sorted(removed), dtype=torch.long, device=probs.device), 0.0)  # [V]
    residual = residual + p_node * (residual.sum() <= 0)  # [V]
    return Verdict(len(path), int(draw(residual, generator)), probs, path=tuple(path))


def replay_tree_verify(reference: list[int], drafted: list[int], parents: list[int]) -> Verdict:
    """Replay on a tree: from the root, step to the first child equal to the rollout's next token
    while there is one; the target's token is the rollout's token after the path."""
    below = children(parents)
    path: list[int] = []
    node = -1
    while True:
        node = next((child for child in below[node + 1] if drafted[child] == reference[len(path)]), None)
        if node is None:
            return Verdict(len(path), reference[len(path)], path=tuple(path))
        path.append(node)


def replay_verify(reference: list[int], drafted: list[int]) -> Verdict:
    """Replay against a fixed target rollout (to compare drafters on identical text): keep drafts
    while they equal the rollout; the target's token is the rollout's next one.

    a = max{k : d_i = y_i for all i <= k};   token = y_{a+1}      (y = the rollout from here on)
    """
    accepted = 0
    while accepted < len(drafted) and drafted[accepted] == reference[accepted]:
        accepted += 1
    return Verdict(accepted, reference[accepted])


def rejection_verify(
    probs: torch.Tensor,
    drafted: torch.Tensor,
    draft_probs: torch.Tensor | None,
    generator: torch.Generator,
) -> Verdict:
    """Speculative sampling: accept d_i with probability min(1, p_{i-1}(d_i) / q_i(d_i)); at the first
    rejection sample the correction from the residual norm(max(0, p - q)); if every draft is
    accepted sample the bonus from p_D.

    All D tests at once: u_1 .. u_D ~ U(0, 1), a = the number of leading i with u_i < p_{i-1}(d_i) /
    q_i(d_i); token ~ norm(max(0, p_a - q_{a+1})) with q_{D+1} = 0, so the bonus comes from p_D. The
    draws are those of testing the drafts one at a time: D uniforms, then one for the token (`draw`).

    probs: [D+1, V] target distributions; drafted: [D] long; draft_probs: [D, V], or None for a
    deterministic drafter, whose q is one-hot on d_i (accept with probability p(d_i), residual = p
    with d_i removed).
    """
    num_drafts = drafted.shape[0]
    if num_drafts == 0:  # a plain sampling step
        return Verdict(0, int(draw(probs[0], generator)), probs)
    rows = torch.arange(num_drafts, device=drafted.device)  # [D]
    p_of_draft = probs[rows, drafted]  # [D]
    q_of_draft = draft_probs[rows, drafted] if draft_probs is not None else torch.ones_like(p_of_draft)  # [D]
    uniforms = torch.rand(num_drafts, generator=generator, device=generator.device).to(probs.device)  # [D]
    passed = uniforms * q_of_draft < p_of_draft  # [D]: u < p/q without dividing (q may be tiny)
    accepted = passed.long().cumprod(dim=0).sum().view(1)  # [1] a
    p_a = probs.index_select(0, accepted)[0]  # [V]
    residual = torch.clamp(p_a - _next_draft_row(draft_probs, drafted, accepted, p_a), min=0.0)  # [V]
    # p == q exactly leaves no residual: a rejection there had probability 0; fall back to p
    residual = residual + p_a * (residual.sum() <= 0)  # [V]
    token = draw(residual, generator).to(accepted.device)  # [1]
    accepted_count, token_id = torch.cat([accepted, token]).tolist()
    return Verdict(accepted_count, token_id, probs)


def _next_draft_row(
    draft_probs: torch.Tensor | None, drafted: torch.Tensor, accepted: torch.Tensor, p_a: torch.Tensor
) -> torch.Tensor:
    """q_{a+1} as a [V] row: the draft distribution of the first rejected draft (one-hot on d_{a+1} for a
    deterministic drafter), or zeros when all D were accepted. accepted: [1] a, 0 <= a <= D, D >= 1."""
    num_drafts = drafted.shape[0]
    present = (accepted < num_drafts).to(p_a.dtype)  # [1]: 0 when there is no draft at slot a
    slot = accepted.clamp(max=num_drafts - 1)  # [1]
    if draft_probs is None:
        return torch.zeros_like(p_a).scatter_(0, drafted.index_select(0, slot), present)  # [V]
    return draft_probs.index_select(0, slot)[0] * present  # [V]


def draw(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw from unnormalised non-negative weights [V] (positive total), left on the generator's
    device as a [1] tensor: the inverse CDF at one uniform, t = min{i : W_i > u * W_V} with W the
    running sum in float64, so a zero weight is never drawn. One uniform instead of V exponentials
    (torch.multinomial's way), which on a CPU is most of the cost of drawing from a 49k vocabulary."""
    cumulative = weights.to(generator.device, torch.float64).cumsum(dim=-1)  # [V]
    u = torch.rand(1, generator=generator, device=generator.device, dtype=torch.float64)  # [1]
    return torch.searchsorted(cumulative, u * cumulative[-1:], right=True).clamp_(max=weights.shape[-1] - 1)


def sample(weights: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from unnormalised non-negative weights [V], by torch.multinomial (the drafters' draw)."""
    return int(torch.multinomial(weights.to(generator.device), 1, generator=generator))
