"""Live runs in process, as the worker's compute thread runs them (a tiny model in the worker's model
cache, a real store): the speedup's plain run is measured in the same job, each lane's output is
checked token by token against it, and every lane drafts from the same snapshot of the drafter's
memory across requests."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from backend.core.drafter import confident_length
from backend.core.verify import SamplingParams
from backend.drafters import DrafterOptions
from backend.lab.store import RunStore
from backend.serving.jobs import JobCancelled
from backend.serving.live import LiveRuns
from backend.serving.model_cache import ModelCache
from backend.serving.plain import first_difference, identity
from backend.serving.run_request import LaneSpec, RunRequest

PROMPT = "w5 w9 w13 w5 w9 w13 w22"
WARM_PROMPT = "w30 w31 w32 w33"


class RecordingJob:
    """What LiveRuns needs of a job: the request, a place for records, and a cancel check
    (`cancel_after`: cancelled once that many step records were emitted)."""

    def __init__(self, request: RunRequest, cancel_after: int | None = None) -> None:
        self.request = request
        self.records: list[dict] = []
        self.cancel_after = cancel_after

    def emit(self, record: dict) -> None:
        self.records.append(record)

    def check(self) -> None:
        if self.cancel_after is not None and len(self.of("step")) >= self.cancel_after:
            raise JobCancelled

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]

    def summaries(self) -> list[dict]:
        return sorted(self.of("summary"), key=lambda r: r["lane"])


def request(lanes, prompt: str = PROMPT, max_new_tokens: int = 40, temperature: float = 0.0, **fields) -> RunRequest:
    return RunRequest(
        turns=[prompt],
        target="tiny",
        lanes=[LaneSpec(name, draft_len, DrafterOptions()) for name, draft_len in lanes],
        max_new_tokens=max_new_tokens,
        sampling=SamplingParams(temperature),
        seed=0,
        **fields,
    )


class Worker:
    """The worker's parts a live run touches: model cache (drafters kept across jobs) and store."""

    def __init__(self, model, path) -> None:
        self.models = ModelCache(10**10, loader=lambda spec, **_: model)
        self.store = RunStore(path)
        self.live = LiveRuns(self.models, self.store)

    def run(self, req: RunRequest, cancel_after: int | None = None) -> RecordingJob:
        job = RecordingJob(req, cancel_after)
        self.live.run(job, self.models.get(req.target))
        return job

    def suffix(self):
        return self.models.drafter("tiny", "suffix", DrafterOptions())


@pytest.fixture
def worker(tiny, tmp_path):
    made = Worker(tiny, tmp_path / "runs.duckdb")
    yield made
    made.store.close()


def test_the_speedup_divides_by_plain_decoding_measured_in_the_same_job(worker):
    before = datetime.now(UTC)
    job = worker.run(request([("ngram", 4)]))
    after = datetime.now(UTC)
    [baseline] = job.of("baseline")
    [summary] = job.summaries()
    assert baseline["how"] == "interleaved"
    assert before.replace(microsecond=0) <= datetime.fromisoformat(baseline["measured_at"]) <= after
    assert summary["baseline_tokens_per_s"] == baseline["tokens_per_s"]
    assert summary["baseline_measured_at"] == baseline["measured_at"] and summary["baseline_how"] == "interleaved"
    assert summary["speedup"] == pytest.approx(summary["tokens_per_s"] / baseline["tokens_per_s"])
    stored_plain = worker.store.run(baseline["run_id"])
    stored_lane = worker.store.run(summary["run_id"])
    assert stored_plain["kind"] == "baseline" and stored_plain["status"] == "complete"
    assert stored_plain["group_id"] == stored_lane["group_id"] is not None
    assert stored_lane["baseline_tokens_per_s"] == pytest.approx(baseline["tokens_per_s"])
    plain_steps = worker.store.steps(baseline["run_id"])
    assert sum(len(emitted) for emitted in plain_steps["emitted"]) == stored_plain["new_tokens"] > 0
    again = worker.run(request([("ngram", 4)]))
    assert again.of("baseline")[0]["run_id"] != baseline["run_id"]  # every job measures its own


def test_the_hidden_plain_lane_is_stored_not_streamed(worker):
    job = worker.run(request([("ngram", 4)]))
    assert {record["lane"] for record in job.of("step")} == {0}
    assert [record["lane"] for record in job.of("start")] == [0]
    types = [record["type"] for record in job.records]
    assert types.index("baseline") > max(i for i, kind in enumerate(types) if kind == "step")


def test_a_plain_lane_is_the_baseline_of_the_other_lanes(worker):
    job = worker.run(request([("none", 0), ("ngram", 4)]))
    [baseline] = job.of("baseline")
    plain, drafted = job.summaries()
    assert baseline["how"] == "plain lane" and baseline["run_id"] == plain["run_id"]
    assert plain["speedup"] == pytest.approx(1.0) and plain["identity"] is None
    assert drafted["speedup"] == pytest.approx(drafted["tokens_per_s"] / plain["tokens_per_s"])
    group = worker.store.run(plain["run_id"])["group_id"]
    assert [run for run in worker.store.runs(kind="baseline").to_dict("records") if run["group_id"] == group] == []


def test_replay_measures_its_rollout_before_the_lanes_and_uses_it_as_the_baseline(worker):
    job = worker.run(request([("ngram", 2), ("suffix", 4)], replay=True))
    types = [record["type"] for record in job.records]
    [baseline] = job.of("baseline")
    assert baseline["how"] == "before" and types.index("baseline") < types.index("start")
    assert all(summary["baseline_how"] == "before" for summary in job.summaries())


def test_no_baseline_asked_for_means_no_plain_run_and_no_speedup(worker):
    job = worker.run(request([("ngram", 4)], baseline=False))
    [summary] = job.summaries()
    assert job.of("baseline") == [] and summary["speedup"] is None and summary["identity"] is None
    assert len(worker.store.runs(kind="baseline")) == 0


def test_greedy_lanes_are_checked_token_by_token_against_the_plain_run(worker):
    job = worker.run(request([("ngram", 4), ("suffix", 3)]))
    plain_run = worker.store.run(job.of("baseline")[0]["run_id"])
    plain_ids = [t for emitted in worker.store.steps(plain_run["run_id"])["emitted"] for t in emitted]
    for summary in job.summaries():
        assert summary["output_ids"] == plain_ids
        assert summary["identity"] == {"identical": True, "expected": True, "tokens": len(plain_ids), "index": None}


def test_sampling_says_token_identity_is_not_expected_unless_replayed(worker):
    sampled = worker.run(request([("ngram", 4)], temperature=1.0))
    assert sampled.summaries()[0]["identity"]["expected"] is False
    replayed = worker.run(request([("ngram", 4)], temperature=1.0, replay=True))
    checked = replayed.summaries()[0]["identity"]
    assert checked["expected"] is True and checked["identical"] is True


def test_identity_names_the_first_differing_token_on_each_side(tiny):
    decode = tiny.tokenizer.decode
    found = identity([[5, 6], [7, 8]], [[5, 6], [7, 9, 10]], decode, expected=True)
    assert found == {
        "identical": False,
        "expected": True,
        "tokens": 5,
        "index": 3,  # counted over both turns
        "plain_token": 8,
        "plain_text": "w8",
        "lane_token": 9,
        "lane_text": "w9",
    }
    shorter = identity([[5, 6, 7]], [[5, 6]], decode, expected=False)
    assert shorter["index"] == 2 and shorter["lane_token"] is None and shorter["plain_text"] == "w7"
    assert first_difference([1, 2], [1, 2]) is None


def warmed(model, path) -> Worker:
    """A fresh worker whose suffix drafter has learnt one earlier output (the same one every time)."""
    made = Worker(model, path)
    made.run(request([("suffix", 4)], prompt=WARM_PROMPT, baseline=False))
    assert made.suffix().memory()["sequences"] == 1
    return made


def test_two_suffix_lanes_give_the_same_al_as_each_alone_from_the_same_starting_tree(tiny, tmp_path):
    """The D=6 lane ends first; were the lanes to share one global tree, its output would be there for
    the D=2 lane's remaining steps (the last assertion shows that this would change its AL)."""
    prompt, lanes = "w40 w41 w40 w42", [("suffix", 2), ("suffix", 6)]
    together = warmed(tiny, tmp_path / "a.duckdb")
    warm = together.suffix().memory()
    job = together.run(request(lanes, prompt=prompt, max_new_tokens=60))
    assert [start["memory"] for start in job.of("start")] == [warm, warm]
    alone = []
    for number, lane in enumerate(lanes):
        single = warmed(tiny, tmp_path / f"alone{number}.duckdb")
        alone.append(single.run(request([lane], prompt=prompt, max_new_tokens=60)).summaries()[0])
    together_al = [summary["al"] for summary in job.summaries()]
    assert together_al == [summary["al"] for summary in alone]
    seen_other = warmed(tiny, tmp_path / "seen.duckdb")
    seen_other.suffix().learn(alone[1]["output_ids"])  # the D=6 lane's output, as a shared tree would hold it
    contaminated = seen_other.run(request([lanes[0]], prompt=prompt, max_new_tokens=60)).summaries()[0]
    assert contaminated["al"] > alone[0]["al"]


def test_a_jobs_outputs_join_the_drafter_after_the_job_once(worker):
    job = worker.run(request([("suffix", 2), ("suffix", 5)]))
    first, second = job.summaries()
    assert first["output_ids"] == second["output_ids"]  # greedy and lossless: the same output
    assert [start["memory"] for start in job.of("start")] == [{"sequences": 0, "tokens": 0}] * 2
    assert worker.suffix().memory() == {"sequences": 1, "tokens": len(first["output_ids"])}
    rerun = worker.run(request([("suffix", 2)]))
    assert rerun.of("start")[0]["memory"] == {"sequences": 1, "tokens": len(first["output_ids"])}


def test_a_cancelled_job_teaches_the_drafter_nothing(worker):
    with pytest.raises(JobCancelled):
        worker.run(request([("suffix", 2)], max_new_tokens=60), cancel_after=3)
    assert worker.suffix().memory() == {"sequences": 0, "tokens": 0}
    statuses = set(worker.store.runs()["status"])
    assert statuses == {"cancelled"}


def test_a_tree_lane_streams_and_stores_its_tree_and_stays_lossless(worker):
    tree_lane = LaneSpec("ngram", 4, DrafterOptions(), tree_budget=8, tree_topk=3)
    chain = request([("ngram", 4)], prompt="w5 w9 w13 w5 w9 w14 w5 w9 w13 w5 w9")
    job = worker.run(replace(chain, lanes=[tree_lane]))
    [summary] = job.summaries()
    assert summary["identity"]["identical"] is True
    branched = [step for step in job.of("step") if step["parents"] is not None]
    assert branched, "the repeated prompt leaves two continuations of w5 w9"
    for step in branched:
        assert len(step["parents"]) == len(step["drafted"]) and len(step["accepted_path"]) == step["accepted"]
    run = worker.store.run(summary["run_id"])
    assert (run["tree_budget"], run["tree_topk"]) == (8, 3)
    stored = worker.store.steps(summary["run_id"])
    trees = stored[stored["parents"].notna()]
    assert [list(p) for p in trees["parents"]] == [step["parents"] for step in branched]
    assert [list(p) for p in trees["accepted_path"]] == [step["accepted_path"] for step in branched]
    plain = worker.store.run(job.of("baseline")[0]["run_id"])
    assert (plain["tree_budget"], plain["tree_topk"]) == (0, None)


def test_a_lane_with_a_confidence_stop_streams_stores_and_stays_lossless(worker):
    lane = LaneSpec("suffix", 4, DrafterOptions(), min_confidence=0.5)
    job = worker.run(replace(request([("suffix", 4)], prompt="w5 w9 w13 w5 w9 w14 w5 w9 w13 w5 w9"), lanes=[lane]))
    [summary] = job.summaries()
    assert summary["identity"]["identical"] is True
    [start] = job.of("start")
    assert start["min_confidence"] == 0.5
    steps = [step for step in job.of("step") if step["draft_probs"]]
    assert steps and all(confident_length(step["draft_probs"], 0.5) == len(step["drafted"]) for step in steps)
    assert any(step["stop_reason"] == "low-confidence" for step in job.of("step"))  # the stop did cut
    run = worker.store.run(summary["run_id"])
    assert run["min_confidence"] == 0.5 and run["variant"] == "conf=0.5"
    assert worker.store.run(job.of("baseline")[0]["run_id"])["min_confidence"] == 0.0


@pytest.mark.slow
def test_a_job_with_a_tree_lane_runs_on_the_targets_compiled_passes(tiny, tmp_path):
    """On a target whose engines compile, the tree lane and the job's plain baseline both run (and are
    stored as) compiled, so the speedup compares the same passes, and the tree lane stays lossless."""
    compiled = Worker(replace(tiny, compile="on"), tmp_path / "runs.duckdb")
    tree_lane = LaneSpec("ngram", 4, DrafterOptions(), tree_budget=8)
    job = compiled.run(replace(request([("ngram", 4)], max_new_tokens=12), lanes=[tree_lane]))
    [start] = job.of("start")
    assert (start["compile"], start["tree_budget"]) == ("on", 8)
    assert job.summaries()[0]["identity"]["identical"] is True
    assert compiled.store.run(start["run_id"])["compile"] == "on"
    assert compiled.store.run(job.of("baseline")[0]["run_id"])["compile"] == "on"
    compiled.store.close()
