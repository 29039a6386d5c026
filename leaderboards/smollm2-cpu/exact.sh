#!/usr/bin/env bash
# The sample-free tasks (calbench_numeric_{unseen,heldout}_exact: each prompt's whole answer
# distribution, enumerated; 2000 prefixes, 1% residual, 0.01 IQR resolution) for
# SmolLM2-135M-Instruct base, soft and hard, with calbench-hf on a 2-core CPU.
#
#   bash leaderboards/smollm2-cpu/exact.sh          # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
BASE=$(calbench models path smollm2-135m-instruct)
for system in ${SYSTEMS:-base soft hard}; do
  args="pretrained=$BASE,dtype=float32"
  [ "$system" = base ] || args="$args,peft=$HERE/adapters/$system"
  start=$(date +%s)
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template \
    --tasks calbench_numeric_unseen_exact,calbench_numeric_heldout_exact --output_path "$HERE/results_exact/$system"
  echo "$system exact: $(( $(date +%s) - start )) s" | tee -a "$HERE/exact.log"
done
