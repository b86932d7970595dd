"""A launch template filled for one D: its placeholders replaced as plain text (a JSON option's braces stay),
split as a shell would split it."""

from __future__ import annotations

from backend.engines.launch import launch_command


def test_placeholders_are_filled_and_json_braces_stay():
    template = (
        'vllm serve m --port {port} --speculative-config \'{"method": "ngram", "num_speculative_tokens": {draft_len}}\''
    )
    assert launch_command(template, 4, 8001) == [
        "vllm",
        "serve",
        "m",
        "--port",
        "8001",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 4}',
    ]


def test_sglang_draft_tokens_are_d_plus_one():
    template = "x --speculative-num-steps {draft_len} --speculative-num-draft-tokens {draft_len_plus_one}"
    assert launch_command(template, 5, 1)[-3:] == ["5", "--speculative-num-draft-tokens", "6"]
