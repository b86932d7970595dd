"""How the engine runs its target: Hugging Face's own forward over a growing cache (every
architecture; `--compile off`), or the fast path of fast_forward.py (static cache, compiled graphs;
Llama-family models; `--compile on`). Both give the engine the same four calls: a cache for a request,
prefill, a pass of new tokens, and keeping the first n cached positions. `auto` takes the fast path
where the model and machine allow it. Both take token trees (a pass in which each node sees its
ancestors, then keeping the accepted path): the eager forward for models whose attention takes a 4D
mask over every layer, the fast path always.

Knows nothing about drafting or verification.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from transformers import DynamicCache

from backend.core.errors import SpecScopeError, first_line
from backend.core.fast_forward import MAX_COMPILED_WIDTH, FastForward, compiler_reason, fast_path_reason
from backend.core.kv import (
    ForwardResult,
    cached_forward,
    keep_path,
    new_cache,
    prepare_for_rollback,
    tree_attention_mask,
    trim_cache,
)
from backend.core.static_kv import StaticKV
from backend.core.tree import TreeLayout, Visibility

COMPILE_CHOICES = ("auto", "on", "off")
TREE_MASKED_ATTENTION = ("sdpa", "eager")  # attention implementations that add a 4D float mask as given
WARM_UP_WIDTHS = (8, 1)  # the verify graph (every width 2..32), then the one-token graph


class EagerPasses:
    """Hugging Face's forward over a DynamicCache: any causal LM transformers can run."""

    compile = "off"

    def __init__(self, model) -> None:
        self.model = model

    def new_cache(self, capacity: int) -> DynamicCache:
        return new_cache(self.model)

    def prefill(self, tokens: list[int], cache: DynamicCache, want_hidden: bool) -> ForwardResult | None:
        result = cached_forward(self.model, tokens, cache, want_hidden, logits_to_keep=1) if tokens else None
        prepare_for_rollback(cache)
        return result

    def forward(
        self,
        tokens: list[int],
        cache: DynamicCache,
        want_hidden: bool,
        last_only: bool = False,
        tree: TreeLayout | None = None,
    ) -> ForwardResult:
        """Logits of every new position, or (last_only) of the last one. With `tree`, tokens are
        [x, n_1 .. n_N] and each node sees the cache, x and its ancestors, at position past + depth."""
        if tree is None:
            return cached_forward(self.model, tokens, cache, want_hidden, logits_to_keep=1 if last_only else 0)
        past = cache.get_seq_length()
        mask = tree_attention_mask(past, tree, self.model.dtype)  # [1, 1, T, past + T]
        positions = (past + tree.depths)[None]  # [1, T]
        return cached_forward(self.model, tokens, cache, want_hidden, 0, mask, positions)

    def keep(self, cache: DynamicCache, keep: int) -> None:
        trim_cache(cache, keep)

    def keep_path(self, cache: DynamicCache, start: int, path: tuple[int, ...]) -> None:
        """Keep the first `start` positions, then the tree pass's nodes on `path`, moved into place."""
        keep_path(cache, start, path)

    def check_tree(self) -> None:
        """Raise unless this model's passes can score a tree."""
        implementation = self.model.config._attn_implementation
        if implementation not in TREE_MASKED_ATTENTION:
            raise SpecScopeError(
                f"tree drafts need sdpa or eager attention, and this model uses {implementation}: set tree budget 0"
            )
        if any(getattr(layer, "is_sliding", False) for layer in new_cache(self.model).layers):
            raise SpecScopeError(
                "tree drafts need full attention in every layer (this model has sliding-window layers)"
            )

    def warm_up(self, progress: Callable[[str], None] | None = None, batched: bool = False) -> None:
        """A short prefill and a few steps, so the first request does not pay for the kernels' first use."""
        cache = self.new_cache(0)
        self.prefill([0] * 64, cache, False)
        for _ in range(3):
            self.forward([0, 0], cache, False)


class CompiledPasses:
    """The fast path: a static cache and compiled graphs (see fast_forward.py)."""

    compile = "on"

    def __init__(self, model) -> None:
        self.fast = FastForward(model, compiled=True)

    def new_cache(self, capacity: int) -> StaticKV:
        return self.fast.new_cache(capacity)

    def prefill(self, tokens: list[int], cache: StaticKV, want_hidden: bool) -> ForwardResult | None:
        return self.forward(tokens, cache, want_hidden, last_only=True) if tokens else None

    def forward(
        self,
        tokens: list[int],
        cache: StaticKV,
        want_hidden: bool,
        last_only: bool = False,
        tree: TreeLayout | None = None,
    ) -> ForwardResult:
        """Logits of every new position (with last_only, at least the last one's: the compiled widths
        return all). With `tree`, tokens are [x, n_1 .. n_N] and each node sees the cache, x and its
        ancestors, at position past + depth."""
        if cache.room() < len(tokens):  # a drafter's cache, sized before its request's length was known
            cache.grow(len(tokens))
        ids = torch.tensor([tokens], dtype=torch.long, device=self.fast.device)  # [1, T]
        seen = Visibility.of([tree], len(tokens), self.fast.device) if tree is not None else None
        result = self.fast.forward(ids, cache, last_only, seen)
        return ForwardResult(result.logits[0], tuple(h[0] for h in result.hidden) if want_hidden else None)

    def keep(self, cache: StaticKV, keep: int) -> None:
        cache.keep(keep)

    def keep_path(self, cache: StaticKV, start: int, path: tuple[int, ...]) -> None:
        """Keep the first `start` positions, then the tree pass's nodes on `path`, moved into place."""
        pass_start = torch.tensor([start - 1], device=cache.lengths.device)  # the pass began with x
        cache.keep_slots(pass_start, [[0, *(node + 1 for node in path)]])

    def check_tree(self) -> None:
        """The fast path's own attention takes any tree: nothing to check."""

    def warm_up(self, progress: Callable[[str], None] | None = None, batched: bool = False) -> None:
        """Compile the graphs now, single-sequence ones (or load their packages, aot_packages.py), and with
        `batched` those for batches of two or more rows (each a minute or two on a small CPU); then run
        every width of torch.compile's graphs once, since oneDNN builds a kernel for each new row count on
        its first use (~0.1 s each, which a timed step would pay; a package's first passes cost no more
        than its later ones)."""
        packages = self.fast.packages
        for rows in (1, 2) if batched else (1,):
            for width in WARM_UP_WIDTHS:
                if progress:
                    kind = "one-token" if width == 1 else "verify"
                    packaged = rows == 1 and packages and packages.path(packages.kind_of(width)).exists()
                    doing = "loading the compiled" if packaged else "compiling the"
                    progress(f"{doing} target's {kind} pass" + (" for batches" if rows > 1 else ""))
                self._run_once(rows, width)
            if rows == 1 and packages and packages.complete():
                continue
            if progress and rows == 1 and packages and packages.failure:
                progress(f"no ahead-of-time package ({packages.failure}): torch.compile's graphs serve")
            if progress:
                progress("first use of every verify width")
            for width in range(2, MAX_COMPILED_WIDTH + 1):
                self._run_once(rows, width)

    def _run_once(self, rows: int, width: int) -> None:
        ids = torch.zeros(rows, width, dtype=torch.long, device=self.fast.device)  # [B, T]
        self.fast.forward(ids, self.fast.new_cache(2 * MAX_COMPILED_WIDTH, rows))


def resolve_compile(model, choice: str) -> tuple[str, str | None]:
    """('on' | 'off', why it is off where `auto` turned it off). `on` where impossible is an error."""
    if choice not in COMPILE_CHOICES:
        raise SpecScopeError(f"unknown compile choice '{choice}': use {', '.join(COMPILE_CHOICES)}")
    if choice == "off":
        return "off", None
    reason = fast_path_reason(model) or compiler_reason(next(model.parameters()).device)
    if reason and choice == "on":
        raise SpecScopeError(f"--compile on is not possible for this target: {reason}")
    return ("off", reason) if reason else ("on", None)


def compile_mode(model, choice: str) -> str:
    """ "on" or "off": what `choice` (auto | on | off) comes to for this model here."""
    return resolve_compile(model, choice)[0]


def prepare(model, choice: str, progress: Callable[[str], None] | None = None) -> str:
    """Build and warm the passes for `choice` (compiling now where it is on); returns the choice the
    model's engines should use: `choice`, or "off" where `auto` met a compilation that fails here (an
    inductor or C++ build error), which `progress` is told. With `on`, such a failure is an error."""
    passes = target_passes(model, choice)
    try:
        passes.warm_up(progress)
    except Exception as error:  # torch.compile fails in many ways (compiler, memory, unsupported op)
        if passes.compile == "off":
            raise
        _COMPILED.pop(model, None)
        reason = first_line(error)[:200]
        if choice == "on":
            raise SpecScopeError(f"compiling the target's passes failed: {reason}") from error
        if progress:
            progress(f"compiling failed ({reason}); using the eager forward")
        target_passes(model, "off").warm_up(progress)
        return "off"
    return choice


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its CompiledPasses


def target_passes(model, choice: str = "off") -> EagerPasses | CompiledPasses:
    """The passes for this model; compiled graphs are built once per model and shared by its engines."""
    mode, _ = resolve_compile(model, choice)
    if mode == "off":
        return EagerPasses(model)
    if model not in _COMPILED:
        _COMPILED[model] = CompiledPasses(model)
    return _COMPILED[model]


def single_sequence_graphs(model) -> str:
    """What runs this model's compiled one-row passes now, for a benchmark to say beside its figures:
    "packages" (every kind loaded, aot_packages.py; in bf16 the verify package serves one-token passes
    too), "torch.compile" (with why no package where one failed), "packages (one-token)" or "packages
    (verify)" (the other on torch.compile), or "eager"."""
    passes = _COMPILED.get(model)
    if passes is None:
        return "eager"
    packages = passes.fast.packages
    loaded = packages.loaded() if packages else []
    if packages and packages.complete():
        return "packages"
    if loaded:
        return f"packages ({'one-token' if loaded == [1] else 'verify'})"
    return f"torch.compile (no package: {packages.failure})" if packages and packages.failure else "torch.compile"
