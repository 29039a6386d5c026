#!/usr/bin/env bash
# Transfer tasks for Gemma-3-270M base (no chat template): MCQ answer balance and
# open-ended generation (first-token support via calbench-hf, and sample diversity), at
# the SmolLM2 rows' sample counts. NoveltyBench and the retention group need the Hugging
# Face hub, which this machine cannot reach (see the README).
#
#   bash leaderboards/gemma3-270m-cpu/transfer.sh   # from the repository root
set -euo pipefail
HERE=leaderboards/gemma3-270m-cpu
OPEN_SAMPLES=${OPEN_SAMPLES:-20}   # samples per open-ended prompt (the task's default: 100)
MCQ_SAMPLES=${MCQ_SAMPLES:-60}     # MCQ generations (the task's default: 1000)
args="pretrained=$(calbench models path gemma-3-270m),dtype=float32"
calbench eval --model calbench-hf --model_args "$args" --num-samples "$MCQ_SAMPLES" \
  --tasks calbench_mcq_balance --output_path "$HERE/results/base"
calbench eval --model calbench-hf --model_args "$args" --num-samples "$OPEN_SAMPLES" \
  --tasks calbench_open_ended --output_path "$HERE/results/base"
