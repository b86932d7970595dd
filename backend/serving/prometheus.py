"""GET /metrics: the worker's served totals (lab/served.py) in the Prometheus text format, under the
names and labels vLLM gives them, so a dashboard or alert built on a vLLM server reads this worker too:

    vllm:spec_decode_num_drafts_total{model_name, engine}              steps that drafted
    vllm:spec_decode_num_draft_tokens_total{model_name, engine}        tokens drafted
    vllm:spec_decode_num_accepted_tokens_total{model_name, engine}     drafted tokens accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name, engine, position}
                                                                       steps accepting position (from 0)
    vllm:generation_tokens_total{model_name, engine}                   tokens generated, any drafter

Names, labels and meanings follow vllm/v1/spec_decode/metrics.py (`SpecDecodingProm`) and
vllm/v1/metrics/loggers.py (`PrometheusStatLogger`); the names themselves live in engines/vllm.py, the
module that reads them from a vLLM server. `model_name` is the target as runs asked for it; `engine` is
always "0" (one worker decodes on one device). Counters start at zero with the worker process. Only what
the worker truly counts is exposed: no request, queue or cache figures. Knows nothing about models.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from backend.engines import vllm
from backend.lab.served import SERVED, ServedCounts

ENGINE = "0"


class ServedCollector(Collector):
    """Reads the totals afresh on each scrape."""

    def __init__(self, served: ServedCounts) -> None:
        self.served = served

    def collect(self) -> Iterator[CounterMetricFamily]:
        labels = list(vllm.LABELS)
        families = {
            name: CounterMetricFamily(name, documentation, labels=labels)
            for name, documentation in (
                (vllm.DRAFTS, "Number of spec decoding drafts."),
                (vllm.DRAFT_TOKENS, "Number of draft tokens."),
                (vllm.ACCEPTED_TOKENS, "Number of accepted tokens."),
                (vllm.GENERATION_TOKENS, "Number of generation tokens processed."),
            )
        }
        per_position = CounterMetricFamily(
            vllm.ACCEPTED_PER_POSITION, "Accepted tokens per draft position.", labels=[*labels, vllm.POSITION]
        )
        for target, totals in sorted(self.served.snapshot().items()):
            values = [target, ENGINE]
            counts = totals.acceptance
            families[vllm.DRAFTS].add_metric(values, counts.drafts)
            families[vllm.DRAFT_TOKENS].add_metric(values, counts.drafted_tokens)
            families[vllm.ACCEPTED_TOKENS].add_metric(values, counts.accepted_tokens)
            families[vllm.GENERATION_TOKENS].add_metric(values, totals.generated_tokens)
            for position, accepted in enumerate(counts.accepted_per_position):
                per_position.add_metric([*values, str(position)], accepted)
        yield from families.values()
        yield per_position


def router(served: ServedCounts = SERVED) -> APIRouter:
    """The route, reading `served` (the process's totals unless told otherwise)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServedCollector(served))
    routes = APIRouter()

    @routes.get("/metrics", summary="speculative-decoding counters in Prometheus text, under vLLM's names")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return routes
