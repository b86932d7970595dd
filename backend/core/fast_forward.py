"""The target's forward pass written for speed: a static KV cache, fused projections, and
`torch.compile` graphs, so verifying D drafts costs about what one token costs.

Why not Hugging Face's forward: per pass it builds a mask, concatenates the cache, and dispatches ~40
small operators per layer from Python; on a 2-core CPU that overhead is most of a pass (see
docs/measurements/). Here a pass is one compiled graph (gpt-fast's recipe, gpt-fast/model.py): the
decoder layers of a Llama-family model read from the Hugging Face module's own weights (norms,
rotary embedding, embedding and LM head are its modules; q/k/v and gate/up are concatenated into one
matrix each), keys and values go into `StaticKV` at each row's own length, and a new token sees the
row's cached slots and, among the pass's new tokens, those a `Visibility` allows: the ones up to itself
(a chain), or itself and its ancestors at the position of its depth (a token tree, tree.py). Chains and
trees share the graphs, so a tree is verified at the compiled speed. In bf16 each query row attends as
in a one-token pass (row_attention.py), so a verify pass scores a token exactly as plain decoding does.
Graphs:

- T = 1 (plain decoding and one-token drafts), and one graph for 2 <= T <= MAX_COMPILED_WIDTH with
  the width symbolic, so every verify width shares it (no padding); batch size and cache capacity
  are symbolic too. Wider passes (long prompts) run the same module uncompiled.
- CPU: inductor with weight freezing (the weights become constants, packed once) and its C++ GEMM
  template (max-autotune), whose micro-kernels read the weights once per pass for up to 4 rows at about
  the speed of one: on this machine's AMD cores ~25 GB/s where MKL's fp32 GEMV reaches ~9, and a
  verify pass of 2-4 tokens costs 0.9-1.1x a one-token pass where oneDNN's packed GEMM cost 1.7-1.9x
  (see CPU_GRAPHS and inductor_templates.py); a batch's verify passes keep oneDNN on AVX-512 CPUs, where it
  is faster at 16 rows and more (CPU_BATCH_VERIFY). The single-sequence graphs
  are built ahead of time into packages a later start loads in seconds (aot_packages.py); batches of two
  or more rows use torch.compile's graphs, kept in inductor's on-disk cache (inductor_cache.py), so a
  later start skips their lowering and C++ builds.
- CUDA: inductor's default mode (fused kernels). CUDA graphs are not captured: they need the cache
  as static module buffers, which this path does not use.

Hidden states come back for every layer in Hugging Face's convention (index i < L: the input of
layer i; index L: the final normed state), so the trained drafters read the same tensors as on the
eager path. Knows nothing about drafting or verification.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

import torch
from torch import nn

from backend.core.aot_packages import PackagedGraphs, packages_enabled
from backend.core.inductor_cache import allow_frozen_onednn_weights, keyed_by, linear_weights_digest
from backend.core.inductor_templates import adjust_templates
from backend.core.kv import ForwardResult
from backend.core.row_attention import REDUCED_PRECISION, Attention, attention_for
from backend.core.static_kv import StaticKV
from backend.core.tree import Visibility

MAX_COMPILED_WIDTH = 65  # the widest pass a step verifies: a tree of 64 drafts (the dashboard's largest) and its root
LLAMA_LIKE = ("llama", "mistral", "qwen2")
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)  # a few graphs per model held
# CPU settings. A single sequence's graphs: inductor's C++ GEMM template, which reads ~25 GB/s of weights
# for one token; verify widths (M symbolic, traced with 4 rows) use 4-row register blocks on AVX-512
# (inductor_templates.offer_four_row_blocks). Whole passes on a 2-core AMD EPYC with AVX-512, 200 cached
# tokens, one process, interleaved, medians (one token 22.0 ms): T = 2/4/8/9/16 took 25.2/26.4/31.8/36.9/52.7
# ms, oneDNN's packed GEMM (freezing alone) 35.3/31.6/33.7/34.7/46.3; without AVX-512, 40.9/43.5/56.8/62.1/79.9
# against oneDNN's 61.2/70.1/80.5/75.7/111.8 (one token 33.4). Verify passes of a batch (B x T rows) keep
# oneDNN on AVX-512, where it overtakes the template by 16 rows (frozen 576 -> 3072 linears at M = 16:
# 16.6 ms against 17.4 with 4-row blocks, 29.9 with 8-row ones).
CPU_GRAPHS = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}
CPU_BATCH_VERIFY = {"freezing": True} if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else CPU_GRAPHS


def fast_path_reason(model: nn.Module) -> str | None:
    """Why this model cannot take the fast path (None when it can)."""
    config = model.config.get_text_config(decoder=True)
    if config.model_type not in LLAMA_LIKE:
        return f"the fast path covers {', '.join(LLAMA_LIKE)} models, not {config.model_type}"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "the fast path has no sliding-window attention"
    layer = model.get_decoder().layers[0]
    if hasattr(layer.self_attn, "q_norm") or not hasattr(layer.mlp, "gate_proj"):
        return "the fast path covers Llama-shaped layers only"
    return None


def compiler_reason(device: torch.device) -> str | None:
    """Why torch.compile cannot run here (None when it can): inductor's CPU code needs a C++ compiler."""
    if device.type == "cpu" and shutil.which("g++") is None and shutil.which("c++") is None:
        return "torch.compile needs a C++ compiler on the CPU (install g++)"
    if device.type not in ("cpu", "cuda"):
        return f"compilation is set up for CPU and CUDA, not {device.type}"
    return None


class _FusedLayer(nn.Module):
    """One decoder layer: the Hugging Face layer's norms and MLP activation, its projections fused."""

    def __init__(self, layer: nn.Module, attend: Attention) -> None:
        super().__init__()
        attention, mlp = layer.self_attn, layer.mlp
        self.attend = attend
        self.input_norm = layer.input_layernorm
        self.post_attention_norm = layer.post_attention_layernorm
        self.qkv = _concatenated([attention.q_proj, attention.k_proj, attention.v_proj])
        self.o_proj = attention.o_proj
        self.gate_up = _concatenated([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        self.act = mlp.act_fn
        self.head_dim = attention.head_dim
        self.q_size = attention.q_proj.out_features
        self.kv_size = attention.k_proj.out_features

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        visible: torch.Tensor,
        rows: torch.Tensor,
        slots: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
    ) -> torch.Tensor:
        batch, width, _ = x.shape
        q, k, v = self.qkv(self.input_norm(x)).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(batch, width, -1, self.head_dim).transpose(1, 2)  # [B, heads, T, hd]
        k = k.view(batch, width, -1, self.head_dim).transpose(1, 2)  # [B, kv_heads, T, hd]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys[rows, :, slots] = k.transpose(1, 2)  # [B, T, kv_heads, hd] into each row's slots
        values[rows, :, slots] = v.view(batch, width, -1, self.head_dim)
        attended = self.attend(q, keys, values, visible)  # [B, heads, T, hd]
        x = x + self.o_proj(attended.transpose(1, 2).reshape(batch, width, -1))
        gate, up = self.gate_up(self.post_attention_norm(x)).chunk(2, dim=-1)
        return x + self.down_proj(self.act(gate) * up)


class _FusedModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        decoder = model.get_decoder()
        attend = attention_for(next(model.parameters()).dtype)  # width-invariant rows in bf16 (row_attention.py)
        self.embed = decoder.embed_tokens
        self.rotary = decoder.rotary_emb
        self.layers = nn.ModuleList(_FusedLayer(layer, attend) for layer in decoder.layers)
        self.norm = decoder.norm
        self.lm_head = model.get_output_embeddings()

    def forward(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        offsets: torch.Tensor,
        among: torch.Tensor,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [B, T] at slots lengths[b] + t, at RoPE positions lengths[b] + offsets[b, t]; new token t
        sees the row's cached slots and new token u where among[b, t, u]. Returns logits [B, T, V]
        ([B, 1, V] with last_only) and hidden [L+1, B, T, H]."""
        batch, width = ids.shape
        new_slots = lengths[:, None] + torch.arange(width, device=ids.device)[None, :]  # [B, T]
        positions = lengths[:, None] + offsets  # [B, T]
        past = torch.arange(keys[0].shape[2], device=ids.device)[None, None, :] - lengths[:, None, None]  # [B, 1, S]
        new = among.gather(2, past.clamp(0, width - 1).expand(batch, width, -1))  # [B, T, S]: u = slot - length
        visible = ((past < 0) | (new & (past < width)))[:, None]  # [B, 1, T, S]
        rows = torch.arange(batch, device=ids.device)[:, None].expand(batch, width)  # [B, T]
        x = self.embed(ids)  # [B, T, H]
        cos, sin = self.rotary(x, positions)  # [B, T, hd] each
        hidden = []
        for layer, layer_keys, layer_values in zip(self.layers, keys, values, strict=True):
            hidden.append(x)
            x = layer(x, cos, sin, visible, rows, new_slots, layer_keys, layer_values)
        x = self.norm(x)
        hidden.append(x)
        return self.lm_head(x[:, -1:] if last_only else x).float(), torch.stack(hidden)


class FastForward:
    """Passes of one Llama-family target over a StaticKV; `compiled` picks torch.compile graphs."""

    def __init__(self, model: nn.Module, compiled: bool) -> None:
        reason = fast_path_reason(model)
        if reason:
            raise ValueError(reason)
        config = model.config.get_text_config(decoder=True)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads or config.num_attention_heads
        self.head_dim = model.get_decoder().layers[0].self_attn.head_dim
        self.module = _FusedModel(model).eval()
        self.compiled = compiled
        self._graphs: Callable | None = None if compiled else self.module  # torch.compile's: made when first needed
        # inductor reads freezing outside torch.compile's `options`, so the settings are patched around each
        # call (a graph compiles at its first call); on CUDA the defaults stand
        on_cpu = compiled and self.device.type == "cpu"
        self._graph_settings = CPU_GRAPHS if on_cpu else {}  # every graph's but a batch's verify graph
        self._batch_verify = CPU_BATCH_VERIFY if on_cpu else {}
        # bf16 and fp16 score every row as in a one-token pass only within one graph: one-token passes take
        # the verify graph (_through_verify_graph)
        self.one_graph = compiled and self.dtype in REDUCED_PRECISION
        if self.one_graph:  # and a batch's verify graph the same products as a single sequence's
            self._batch_verify = self._graph_settings
        self._weights = linear_weights_digest(self.module) if on_cpu else None  # the weights freezing packs
        self._packed_weights: str | None = None  # _weights, once inductor's on-disk cache takes them
        self.packages: PackagedGraphs | None = None  # single-sequence graphs compiled ahead of time (aot_packages.py)
        if self._weights and packages_enabled(self.device):
            identity = f"{self._weights}\n{config.to_json_string()}"
            per_kind = (
                {2: self._graph_settings} if self.one_graph else {1: self._graph_settings, 2: self._graph_settings}
            )
            self.packages = PackagedGraphs(self.module, self.new_cache, identity, per_kind, MAX_COMPILED_WIDTH)

    def new_cache(self, capacity: int, batch: int = 1) -> StaticKV:
        return StaticKV.allocate(self.layers, batch, self.kv_heads, capacity, self.head_dim, self.dtype, self.device)

    @torch.no_grad()
    def forward(
        self, ids: torch.Tensor, cache: StaticKV, last_only: bool = False, seen: Visibility | None = None
    ) -> ForwardResult:
        """ids [B, T] after each row's cached tokens; the rows' lengths grow by T. `seen` says what the new
        tokens see of each other (default: a chain each). Returns logits [B, T, V] float32 (with
        last_only, at least the last position's) and the hidden states per layer index, each [B, T, H]."""
        batch, width = ids.shape
        if width == 1 and self.one_graph:
            return self._through_verify_graph(ids, cache)
        if cache.room() < width:
            raise ValueError(f"the static cache holds {cache.capacity} slots: no room for {width} more")
        seen = seen or Visibility.chains(batch, width, ids.device)
        if width > MAX_COMPILED_WIDTH:  # a long prompt or a wide tree, uncompiled
            logits, hidden = self.module(ids, cache.lengths, cache.keys, cache.values, *seen, last_only)
        else:
            if width > 1:  # one graph for every verify width
                for tensor, dim in ((ids, 1), (seen.offsets, 1), (seen.among, 1), (seen.among, 2)):
                    torch._dynamo.mark_dynamic(tensor, dim, min=2, max=MAX_COMPILED_WIDTH)
            for tensor in (ids, *seen, cache.lengths):  # and one for every batch size above 1 (with the cache's)
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
            packaged = self.packages.runner(width) if self.packages and self.packages.fits(batch, cache) else None
            if packaged:  # exported shapes only, dense as exported: a package checks nothing
                dense = (ids.contiguous(), *(tensor.contiguous() for tensor in seen))
                logits, hidden = packaged(dense[0], cache.lengths, cache.keys, cache.values, *dense[1:])
            else:
                graphs = self._compiled()  # first, as it names the packed weights
                settings = self._batch_verify if batch > 1 and width > 1 else self._graph_settings
                with torch._inductor.config.patch(settings), keyed_by(self._packed_weights):
                    logits, hidden = graphs(ids, cache.lengths, cache.keys, cache.values, *seen)
        cache.lengths = cache.lengths + width
        return ForwardResult(logits, tuple(hidden.unbind(0)))

    def _through_verify_graph(self, ids: torch.Tensor, cache: StaticKV) -> ForwardResult:
        """A one-token pass run as a pass of two ([token, token]; the second sees the first, the first does
        not see the second) whose first row is kept: the verify graph's rows are width-invariant, while
        a graph built for T = 1 rounds differently. On CPUs with bf16 units, two rows cost what one does."""
        if cache.room() < 2:
            cache.grow(2)
        result = self.forward(ids.repeat(1, 2), cache)  # dense, as the verify graph was traced
        cache.lengths = cache.lengths - 1  # the second slot is written over by the next pass
        return ForwardResult(result.logits[:, :1], tuple(h[:, :1] for h in result.hidden))

    def _compiled(self) -> Callable:
        """torch.compile's graphs (made at the first pass that needs them: a start served by packages
        never imports the compiler), their frozen weights named for inductor's on-disk cache."""
        if self._graphs is None:
            self._graphs = torch.compile(self.module)
            adjust_templates()
            if self._weights and allow_frozen_onednn_weights():
                self._packed_weights = self._weights
        return self._graphs


def _concatenated(linears: list[nn.Linear]) -> nn.Linear:
    """One Linear computing several (same input) side by side: one GEMM instead of several. Of the first's own
    class, so a linear holding its weights in a narrower dtype than its activations stays one."""
    first = linears[0]
    fused = type(first)(
        first.in_features,
        sum(lin.out_features for lin in linears),
        bias=first.bias is not None,
        device=first.weight.device,
        dtype=first.weight.dtype,
    )
    with torch.no_grad():
        fused.weight.copy_(torch.cat([lin.weight for lin in linears]))
        if first.bias is not None:
            fused.bias.copy_(torch.cat([lin.bias for lin in linears]))
    fused.requires_grad_(False)
    return fused


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x [B, heads, T, hd] with cos/sin [B, T, hd], halves rotated as in Hugging Face's Llama."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
