#!/usr/bin/env bash
# Transfer tasks for SmolLM2-135M-Instruct base and its soft / hard adapters (after run.sh):
# open-ended generation (first-token support via calbench-hf, and sample diversity), MCQ
# answer balance, and the offline drift metric. NoveltyBench and the retention group need
# the Hugging Face hub, which this machine cannot reach (see the README).
#
#   bash leaderboards/smollm2-cpu/transfer.sh       # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
OPEN_SAMPLES=${OPEN_SAMPLES:-20}   # samples per open-ended prompt (the task's default: 100)
MCQ_SAMPLES=${MCQ_SAMPLES:-60}     # MCQ generations (the task's default: 1000)
BASE=$(calbench models path smollm2-135m-instruct)

for system in base soft hard; do
  args="pretrained=$BASE,dtype=float32"
  [ "$system" = base ] || args="$args,peft=$HERE/adapters/$system"
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples "$OPEN_SAMPLES" \
    --tasks calbench_open_ended --output_path "$HERE/results/$system"
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples "$MCQ_SAMPLES" \
    --tasks calbench_mcq_balance --output_path "$HERE/results/$system"
done
calbench drift --model "$BASE" --adapter "$HERE/adapters/soft" --adapter "$HERE/adapters/hard" \
  --output "$HERE/results/drift.json"
