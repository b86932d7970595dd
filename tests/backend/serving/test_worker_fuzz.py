"""A schema-driven fuzz of the worker's API: requests drawn from its own OpenAPI schema (mostly
valid, often not), sent to a real worker with a tiny random model. No request may get a 5xx, drop
its connection, or see internal exception text, in a reply or in any streamed record. Jobs are kept
short (a few new tokens, at most two sweep prompts), and the fuzz stops drawing after a time budget.
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from backend.drafters import DRAFTER_NAMES
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess
from tests.openapi_fuzz import NASTY_INTS, NASTY_TEXT, SchemaStrategies, operations

pytestmark = pytest.mark.slow

EXAMPLES = 150
BUDGET_S = 55.0  # requests drawn after this are not sent
INTERNAL = ("internal error", "Traceback", "Exception")
WORDS = st.lists(st.integers(4, 63), min_size=1, max_size=12).map(lambda ids: " ".join(f"w{i}" for i in ids))


@pytest.fixture(scope="module")
def fuzzed_worker(tiny, tmp_path_factory):
    folder = str(save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")  # a drawn hub id fails at once instead of waiting on a network
        process = WorkerProcess(tmp_path_factory.mktemp("fuzz") / "runs.duckdb", folder)
    process.wait_ready()
    openapi = httpx.get(process.url + "/openapi.json").json()
    texts = WORDS | st.text(max_size=24) | st.sampled_from(NASTY_TEXT)
    names = st.sampled_from([folder, "/no/such/model", "x" * 300, "a\x00b", "\ud800", "~"])
    drafters = st.sampled_from(DRAFTER_NAMES)
    wild = {
        "max_new_tokens": st.integers(1, 4) | st.sampled_from(NASTY_INTS),
        "prompt": texts,
        "messages": st.lists(texts, max_size=3),
        "turns": st.lists(texts, max_size=2),
        "target": names,
        "draft_model": names,
        "drafter_path": names,
        "drafter": drafters | st.text(max_size=8),
        "drafters": st.lists(drafters | st.text(max_size=8), max_size=2),
        "draft_lens": st.lists(st.integers(0, 4) | st.sampled_from(["auto", "soon", *NASTY_INTS]), max_size=2),
        "batch_sizes": st.lists(st.integers(1, 2) | st.sampled_from(NASTY_INTS), max_size=2),
    }
    tame = {  # inside the schema and the validators, and short: these run jobs
        "max_new_tokens": st.integers(1, 4),
        "prompt": WORDS,
        "messages": st.none() | st.lists(WORDS, max_size=2),
        "turns": st.lists(WORDS, min_size=1, max_size=1),
        "target": st.sampled_from([None, folder]),
        "draft_model": st.none(),
        "drafter_path": st.none(),
        "drafter": drafters,
        "draft_len": st.integers(0, 4) | st.just("auto"),
        "drafters": st.lists(st.sampled_from(["none", "ngram", "suffix"]), min_size=1, max_size=1),  # sweeps: small
        "draft_lens": st.lists(st.integers(0, 3), min_size=1, max_size=1),
        "batch_sizes": st.just([1]),
        "settings": st.just({}),
        "ngram_min": st.just(1),
        "ngram_max": st.integers(1, 4),
        "layerskip_exit_layer": st.none() | st.integers(1, 3),
        "lanes": st.lists(
            st.fixed_dictionaries({"drafter": drafters, "draft_len": st.integers(0, 4)}), min_size=2, max_size=3
        ),
    }
    strategies = [SchemaStrategies(openapi, wild), SchemaStrategies(openapi, tame, nasty=False)]
    for kind in strategies:
        question = kind.value(openapi["components"]["schemas"]["QuestionBody"])
        kind.overrides["questions"] = st.lists(question, min_size=1, max_size=2 if kind.nasty else 1)
    yield process, operations(openapi), strategies
    process.stop()


def send(url: str, method: str, path: str, params: dict, body) -> list[str]:
    """Every text the reply carries: its body, or each streamed line. Raises on a dropped connection."""
    content = json.dumps(body) if body is not None else None  # ASCII-escaped: lone surrogates travel too
    headers = {"content-type": "application/json"} if content is not None else {}
    query = urlencode({k: v for k, v in params.items() if v is not None}, errors="surrogatepass")  # raw bytes too
    target = f"{url}{path}?{query}" if query else url + path
    with httpx.stream(method, target, content=content, headers=headers, timeout=60) as reply:
        assert reply.status_code < 500, f"{method} {path} {params} {body!r} -> {reply.status_code}: {reply.read()}"
        if reply.status_code >= 400:  # one JSON body, which may hold U+0085 or U+2028 raw: not split in lines
            text = reply.read().decode()
            error = json.loads(text)["error"]
            assert isinstance(error, str) and error, f"{method} {path}: a 4xx without a message"
            return [text]
        return [line for line in reply.iter_lines() if line]


def test_no_request_drawn_from_the_schema_breaks_the_worker(fuzzed_worker):
    worker, ops, strategies = fuzzed_worker
    deadline = time.monotonic() + BUDGET_S
    seen: set[tuple[str, str]] = set()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one_request(data):
        operation = data.draw(st.sampled_from(ops))
        params, body = data.draw(st.one_of(*(kind.request(operation) for kind in strategies)))
        if time.monotonic() > deadline:  # drawn all the same, so every example draws alike
            return
        path = operation.path
        for name in operation.path_params:
            path = path.replace("{" + name + "}", quote(str(params.pop(name)), safe="", errors="surrogatepass"))
        texts = send(worker.url, operation.method, path, params, body)
        seen.add((operation.method, operation.path))
        for text in texts:
            assert not any(word in text for word in INTERNAL), f"{operation.method} {path} {body!r}: {text[:500]}"

    one_request()
    assert len(seen) >= len(ops) // 2  # the draw reached most of the API
    assert httpx.get(worker.url + "/health").json()["status"] == "ready"
