"""History under AppTest against a real worker: the prompt column (the first line of each run's prompt)
and the table's number formats."""

from __future__ import annotations

import json

from backend.serving.client import WorkerClient
from tests.helpers.apptest import page

LONG_LINE = " ".join(f"w{i % 20 + 5}" for i in range(60))  # 200+ characters on one line


def store_run(url: str, prompt: str) -> str:
    client = WorkerClient(url)
    records = list(client.generate(prompt=prompt, drafter="ngram", draft_len=2, max_new_tokens=6))
    client.close()
    assert records[-1]["type"] == "summary"
    return records[-1]["run_id"]


def test_history_shows_each_runs_first_prompt_line_and_formats_its_numbers(worker_env):
    short = store_run(worker_env.url, "\n  w7 w8 w9 first line\nw10 w11 second line")
    long = store_run(worker_env.url, LONG_LINE + "\nw12 w13")
    at = page("pages/history.py").run()
    assert not at.exception
    frame = at.dataframe[0].value
    prompts = dict(zip(frame["run_id"], frame["prompt"], strict=True))
    assert prompts[short] == "w7 w8 w9 first line"
    assert len(prompts[long]) == 80 and prompts[long].endswith("…") and LONG_LINE.startswith(prompts[long][:79])
    assert list(frame.columns[:2]) == ["created_at", "prompt"]
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["al"]["type_config"]["format"] == "%.2f"
    assert config["acceptance_rate"]["type_config"]["format"] == "percent"
    assert config["new_tokens"]["type_config"]["format"] == "localized"
    assert config["created_at"]["type_config"]["format"] == "YYYY-MM-DD HH:mm:ss"
