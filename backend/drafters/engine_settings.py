"""How serving engines spell a D that depends on the batch size, so the drafters' exports write it the way
each engine reads it. SpecScope's own schedule (`schedule:1=8/4=4/16=2`, and the best fixed D per measured
batch size that Co-design exports) gives each entry from its batch size up to the next entry's, the last
one without end.

TensorRT-LLM's `draft_len_schedule` reads its keys the other way round: a batch size uses the value of the
first key at or above it (`Drafter._effective_draft_len` in tensorrt_llm/_torch/speculative/drafter.py),
the schedule must hold batch size 1 with the value `max_draft_len` (`DecodingBaseConfig.draft_len_schedule`
in tensorrt_llm/llmapi/llm_args.py, whose comment describes the keys as lower bounds: the code above reads
them as upper bounds, and so do we), and above the last key the
engine drafts nothing (`_get_num_cuda_graph_padding_dummy_slots` in tensorrt_llm/_torch/pyexecutor, which
adds draft length 0 for the batch sizes past it).

Pure arithmetic on small dicts; knows nothing about drafters or models.
"""

from __future__ import annotations


def trtllm_draft_len_schedule(schedule: dict[int, int]) -> dict[int, int]:
    """SpecScope's D by batch size as TensorRT-LLM's `draft_len_schedule`: each key the largest batch size
    its value applies to, neighbours with the same D merged, batch size 1 present, and D = 0 at the largest
    batch sizes left to the engine's "no drafts above the last key". The last measured batch size becomes
    the last key, so above it (where nothing was measured) the engine does not speculate. A D above batch
    size 1's cannot be written: the engine clamps every value to `max_draft_len`, batch size 1's D."""
    sizes = sorted(schedule)
    ends = [following - 1 for following in sizes[1:]] + sizes[-1:]  # each entry's last batch size
    segments: list[tuple[int, int]] = []
    for end, size in zip(ends, sizes, strict=True):
        if segments and segments[-1][1] == schedule[size]:
            segments[-1] = (end, schedule[size])
        else:
            segments.append((end, schedule[size]))
    while segments and segments[-1][1] == 0:
        segments.pop()
    table = dict(segments)
    if table and 1 not in table:
        table = {1: segments[0][1], **table}
    return table


def trtllm_schedule_argument(schedule: dict[int, int]) -> str:
    """`, draft_len_schedule={...}` for a TensorRT-LLM decoding config, or nothing where one batch size was
    measured (a schedule of one key would turn speculation off at every larger batch size)."""
    if len(schedule) < 2:
        return ""
    return f", draft_len_schedule={trtllm_draft_len_schedule(schedule)!r}"
