#!/usr/bin/env bash
# The GPU check: on a CUDA machine, run the tests marked `gpu` (bf16 losslessness and synchronised
# timings), the cost of a target pass by width eager beside compiled, and a short speed benchmark in
# bf16. Prints figures; fails if a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
$PY - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this check is for a GPU machine"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
$PY -m pytest -q -m gpu tests
$PY -m backend bench forward --device cuda --dtype bfloat16 --compile on --batch-sizes 1,16 --json
$PY -m backend bench speed --suite data/prompts/specscope_suite.jsonl --limit 9 --categories code_editing,summarization,qa \
    --drafters ngram,suffix --draft-lens 4,8,auto --max-new-tokens 128 --device cuda --dtype bfloat16 --json
