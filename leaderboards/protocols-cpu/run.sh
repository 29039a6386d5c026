#!/usr/bin/env bash
# The four sampling protocols (batch, seeded, ssot, verbalized; calbench/protocols.py) on the
# 42 selected prompts (calbench_numeric_quick_<protocol>: every family's selected points) at
# 50 samples per prompt, the calibration score's reference size, for the two references and
# SmolLM2-135M-Instruct base, soft and hard, all with calbench-hf on a 2-core CPU. The
# independent protocol's numbers at the same size are `calbench demo`'s.
#
#   bash leaderboards/protocols-cpu/run.sh            # from the repository root
set -euo pipefail
HERE=leaderboards/protocols-cpu
ADAPTERS=leaderboards/smollm2-cpu/adapters
SAMPLES=${SAMPLES:-50}
TASKS=calbench_numeric_quick_batch,calbench_numeric_quick_seeded,calbench_numeric_quick_ssot,calbench_numeric_quick_verbalized
BASE=$(calbench models path smollm2-135m-instruct)
run() {  # name, then calbench eval arguments
  local name=$1; shift
  local start; start=$(date +%s)
  calbench eval "$@" --tasks "$TASKS" --num-samples "$SAMPLES" --output_path "$HERE/results/$name"
  echo "$name: $SAMPLES samples per prompt, 4 protocols, in $(( $(date +%s) - start )) s" | tee -a "$HERE/run.log"
}
run oracle --model calbench-oracle
run collapsed --model calbench-collapsed
for system in soft hard; do
  run "$system" --model calbench-hf --model_args "pretrained=$BASE,dtype=float32,peft=$ADAPTERS/$system" --apply_chat_template
done
run base --model calbench-hf --model_args "pretrained=$BASE,dtype=float32" --apply_chat_template
