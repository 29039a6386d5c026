#!/usr/bin/env bash
# The committed SmolLM2-135M-Instruct adapters (adapters/soft, adapters/hard) sampled at 1000
# samples per prompt on the unseen and held-out numeric tasks with calbench-hf: enough valid
# answers per prompt for sample-size-free scores (KS@100 needs 100 valid answers per prompt;
# the first run.sh used 50 per prompt). The adapters answer in a few tokens, so 42,000 samples
# take minutes per adapter on a 2-core CPU. The base model answers with prose (about 1% valid)
# and 32 tokens per sample: SAMPLES_BASE (default 200) per prompt keeps it under half an hour.
#
#   bash leaderboards/smollm2-cpu/run_1000.sh            # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
SAMPLES=${SAMPLES:-1000}
SAMPLES_BASE=${SAMPLES_BASE:-200}
BASE=$(calbench models path smollm2-135m-instruct)

for system in soft hard base; do
  args="pretrained=$BASE,dtype=float32"
  n=$SAMPLES
  if [ "$system" = base ]; then n=$SAMPLES_BASE; else args="$args,peft=$HERE/adapters/$system"; fi
  start=$(date +%s)
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples "$n" \
    --tasks calbench_numeric_unseen,calbench_numeric_heldout --output_path "$HERE/results_$n/$system"
  echo "$system: $n samples per prompt in $(( $(date +%s) - start )) s" | tee -a "$HERE/run_1000.log"
done
