"""What Live and Compare say about a run besides its tokens (AppTest against a real tiny-model worker):
the plain decoding its speedup divides by (measured in the same job, and when), whether the output is
token-identical to it, how warm the suffix drafter's memory was, and how a cut-short stream ended."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from backend.core.cpu_features import cpu_features
from backend.serving.client import WorkerClient
from tests.helpers.apptest import PROMPT, page
from ui import run_status


def captions(at: AppTest) -> str:
    return "\n".join(caption.value for caption in at.caption)


def live_run(drafter: str, draft_len: int | str, max_new: int = 30) -> AppTest:
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(PROMPT)
    at.selectbox(key="live_drafter").set_value(drafter)
    at.select_slider(key="live_d").set_value(draft_len)
    at.number_input(key="live_max_new").set_value(max_new)
    at.button(key="live_run").click().run()
    assert not at.exception
    return at


def cut_short(at: AppTest) -> None:
    """The state a stream leaves when the script is ended midway: its mark, and no summary yet."""
    at.session_state["live_streaming"] = True
    at.session_state["live_last"]["summary"] = None


def test_live_says_when_and_how_plain_decoding_was_measured_and_that_the_output_matches_it(worker_env):
    at = live_run("ngram", 4)
    text = captions(at)
    assert "Speedup over plain decoding of the same prompt and settings, decoded in this job" in text
    assert " UTC: " in text and "tokens/s." in text
    assert at.success[0].value.startswith("Token-identical to plain decoding (")
    speedup = next(metric for metric in at.metric if metric.label == "Speedup vs plain")
    assert speedup.value.endswith("x") and "measured in" not in speedup.value
    assert f"float32 · CPU features {' '.join(cpu_features())}" in text  # beside the target's name


def test_live_says_how_warm_the_suffix_tree_was(worker_env):
    first = live_run("suffix", 3)
    second = live_run("suffix", 3)
    assert "global suffix tree" in captions(first)
    assert "global suffix tree warm at the start: " in captions(second)  # the first run's output is in it


def test_a_stream_cut_short_by_a_rerun_is_said_to_be_interrupted(worker_env):
    at = live_run("ngram", 4, max_new=8)
    cut_short(at)
    at.run()
    assert not at.exception
    assert at.warning[0].value == run_status.INTERRUPTED
    assert 'class="ss-' in "".join(element.proto.body for element in at.html)  # what had arrived is kept


def test_the_stop_button_says_stopped_not_interrupted(worker_env):
    at = live_run("ngram", 4, max_new=8)
    cut_short(at)
    at.button(key="live_stop").click().run()
    assert at.warning[0].value == run_status.STOPPED


def test_compare_marks_identity_memory_and_the_shared_baseline(worker_env):
    at = page("pages/compare.py").run()
    at.text_area(key="cmp_prompt").set_value(PROMPT)
    at.selectbox(key="cmp0_drafter").set_value("suffix")
    at.selectbox(key="cmp1_drafter").set_value("suffix")
    at.select_slider(key="cmp0_d").set_value(2)
    at.select_slider(key="cmp1_d").set_value(6)
    at.number_input(key="cmp_max_new").set_value(30)
    at.button(key="cmp_run").click().run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["same tokens as plain"]) == ["identical", "identical"]
    memory = list(table["drafter memory at start"])
    assert memory[0] == memory[1]  # both lanes start from one snapshot
    assert [message.value.split(":")[0] for message in at.success] == ["Lane 1", "Lane 2"]
    assert "decoded in this job, interleaved token for token with the drafting lanes" in captions(at)
    assert run_status.MEMORY_POLICY in captions(at)


def test_a_stored_run_says_its_speedup_is_estimated_from_that_run(worker_env):
    live_run("ngram", 4, max_new=10)
    client = WorkerClient(worker_env.url)
    stored = next(run for run in client.runs(kind="generate", status="complete") if run["drafter"] == "ngram")
    at = page("pages/live.py")
    at.session_state["live_replay"] = client.run(stored["run_id"])
    at.run()
    assert not at.exception
    note = next(caption.value for caption in at.caption if caption.value.startswith("Estimated from a stored run"))
    assert "its plain decoding was measured in the same job at " in note
