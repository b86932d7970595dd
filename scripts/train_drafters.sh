#!/usr/bin/env bash
# Train every trained-drafter kind for one target on one machine: distil the target once into the shared
# cache, then train all five kinds at the same time (they only read the cache), each for MINUTES of training.
# Weights, checkpoints and model cards land in OUT_ROOT/<kind>-<NAME>/ (resumable: run it again to go on).
#
#   scripts/train_drafters.sh [TARGET] [OUT_ROOT] [MINUTES] [DATA_TOKENS] [NAME]
#   scripts/train_drafters.sh default data/drafters 30 3000000 smollm2      # a GPU run, about 45 minutes
#   FROM=data/drafters scripts/train_drafters.sh default runs 30 3000000 smollm2  # on from the shipped weights
#
# On CUDA it trains in fp32 (so the distilled answers are the ones the CPU default produces; set DTYPE=auto for
# bf16) with large batches; on a CPU lower MINUTES, DATA_TOKENS and BATCH. Knows nothing about the mechanisms.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-default}
OUT_ROOT=${2:-data/drafters}
MINUTES=${3:-30}
DATA_TOKENS=${4:-3000000}
NAME=${5:-smollm2}
PY=${PY:-python3}
DEVICE=${DEVICE:-auto}
DTYPE=${DTYPE:-float32}
BATCH=${BATCH:-128}        # answers distilled together
ROWS=${ROWS:-32}           # training windows per step
WINDOW=${WINDOW:-512}
DISTIL_MINUTES=${DISTIL_MINUTES:-}
VALIDATION_PROMPTS=${VALIDATION_PROMPTS:-8}
TEACHER=${TEACHER:-generate}  # generate | prefill | mix (train --teacher)
SELF_INSTRUCT=${SELF_INSTRUCT:-}  # N: also distil N requests the target writes itself (train --self-instruct)
KINDS=${KINDS:-eagle3 mtp dflash dspark draft-model}
FROM=${FROM:-}             # a folder of <kind>-<NAME> weights to go on from (train --init-from), e.g. data/drafters
REDUCED_VOCAB='{"draft_vocab_size": 6144}'  # keeps each drafter within 20 MB and all five within 80 MB
SHARED_STUDENT='{"share_target_embedding": true}'  # the draft model borrows the target's embedding and LM head

# five processes share the machine: on a CPU, split its cores between them
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) >= 5 ? $(nproc) / 5 : 1 ))}
mkdir -p "$OUT_ROOT"
common=(--target "$TARGET" --device "$DEVICE" --dtype "$DTYPE" --data-tokens "$DATA_TOKENS"
        --distil-batch "$BATCH" --teacher "$TEACHER" --window "$WINDOW" --rows "$ROWS" --validation-prompts "$VALIDATION_PROMPTS"
        ${SELF_INSTRUCT:+--self-instruct "$SELF_INSTRUCT"})
echo "== distil $TARGET: up to $DATA_TOKENS sequence tokens $(date -u +%T)"
$PY -m backend train --kind eagle3 --out "$OUT_ROOT/.distil" --distil-only "${common[@]}" \
    ${DISTIL_MINUTES:+--distil-minutes "$DISTIL_MINUTES"}

echo "== train $KINDS for $MINUTES minutes each, at the same time $(date -u +%T)"
pids=()
for kind in $KINDS; do
    settings='{}'
    case $kind in
        eagle3|dflash|dspark) settings=$REDUCED_VOCAB ;;
        draft-model) settings=$SHARED_STUDENT ;;
    esac
    start=(--settings "$settings")
    if [ -n "$FROM" ]; then start=(--init-from "$FROM/$kind-$NAME"); fi
    $PY -m backend train --kind "$kind" --out "$OUT_ROOT/$kind-$NAME" --minutes "$MINUTES" --tokens 1000000000 \
        --validate-every 1000000 --distil-minutes 0 "${start[@]}" "${common[@]}" >"$OUT_ROOT/$kind-$NAME.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for kind in $KINDS; do echo "-- $kind"; tail -n 2 "$OUT_ROOT/$kind-$NAME.log"; done
echo "== done $(date -u +%T)"
exit $status
