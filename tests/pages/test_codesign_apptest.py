"""The Co-design page's what-if with Streamlit's AppTest: heads typed by hand and a well-known
architecture give the whole D the rules suggest, the ladder and the KV-cache cost, with no curve (nothing
is measured for them); bad input is a message, not a crash."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.helpers.apptest import page


def codesign() -> AppTest:
    return page("pages/codesign.py").run()


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_typed_heads_give_the_whole_d_the_ladder_and_the_kv_cost(worker_env):
    at = codesign()
    at.radio(key="cd_source").set_value("Heads typed by hand").run()
    assert not at.exception and metrics(at)["Suggested D"] == "31"  # the default 32 heads, 8 KV heads
    at.number_input(key="cd_heads").set_value(64).run()
    assert not at.exception
    assert metrics(at)["G (query heads per KV head)"] == "8" and metrics(at)["Suggested D"] == "15"
    assert at.markdown[0].value.startswith("**Suggested D = 15**: 128/G − 1 = 15.00, rounded down")
    assert at.markdown[1].value.endswith(": 15, 31, 47, 63")
    rungs, kv = at.dataframe[0].value, at.dataframe[1].value
    assert list(rungs["D"]) == [15, 31, 47, 63] and (rungs["tile rows used"] == 1.0).all()
    assert list(kv["D"]) == [0, 15, 31, 47, 63]
    # 32 layers x 2 x 8 KV heads x 128 x 2 bytes (bf16) = 128 KiB a token: 8192 tokens = 1024 MiB
    assert kv["KV per sequence (MiB)"][0] == 1024 and kv["sequences that fit"][0] == 40
    assert list(kv["sequences that fit"]) == sorted(kv["sequences that fit"], reverse=True)
    assert "Nothing is measured" in at.info[0].value and not at.get("plotly_chart")


def test_bad_typed_heads_and_kv_inputs_are_messages(worker_env):
    at = codesign()
    at.radio(key="cd_source").set_value("Heads typed by hand").run()
    at.number_input(key="cd_kv_heads").set_value(6).run()
    assert not at.exception and "divide" in at.error[0].value and not at.metric
    at.number_input(key="cd_kv_heads").set_value(8).run()
    at.number_input(key="cd_context").set_value(0).run()
    assert not at.exception and "Context length" in at.error[0].value
    assert metrics(at)["Suggested D"] == "31"  # the rules are still shown


def test_a_well_known_architecture_with_sliding_window_layers(worker_env):
    at = codesign()
    at.radio(key="cd_source").set_value("A well-known architecture").run()
    at.selectbox(key="cd_arch").set_value("Gemma-3-27B").run()
    assert not at.exception and metrics(at)["Suggested D"] == "63" and metrics(at)["KV heads"] == "16"
    captions = " ".join(c.value for c in at.caption)
    assert "huggingface.co/google/gemma-3-27b-it" in captions and "1024-token window" in captions
    bf16 = at.dataframe[1].value["KV per sequence (MiB)"][0]
    at.selectbox(key="cd_dtype").set_value("fp8").run()
    assert at.dataframe[1].value["KV per sequence (MiB)"][0] == bf16 / 2
    assert "Nothing is measured" in at.info[0].value and not at.get("plotly_chart")
