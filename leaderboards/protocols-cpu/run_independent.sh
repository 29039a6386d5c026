#!/usr/bin/env bash
# The independent protocol (calbench_numeric_quick: one fresh request per sample) at the same
# 50 samples per prompt as run.sh, for the systems named (default: all five), into the same
# folders, so `calbench leaderboard protocols` sets every protocol side by side.
#
#   bash leaderboards/protocols-cpu/run_independent.sh [oracle collapsed soft hard base]
set -euo pipefail
HERE=leaderboards/protocols-cpu
ADAPTERS=leaderboards/smollm2-cpu/adapters
SAMPLES=${SAMPLES:-50}
BASE=$(calbench models path smollm2-135m-instruct)
systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(oracle collapsed soft hard base)
for name in "${systems[@]}"; do
  case $name in
    oracle) args=(--model calbench-oracle) ;;
    collapsed) args=(--model calbench-collapsed) ;;
    soft|hard) args=(--model calbench-hf --model_args "pretrained=$BASE,dtype=float32,peft=$ADAPTERS/$name" --apply_chat_template) ;;
    base) args=(--model calbench-hf --model_args "pretrained=$BASE,dtype=float32" --apply_chat_template) ;;
    *) echo "unknown system $name" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  calbench eval "${args[@]}" --tasks calbench_numeric_quick --num-samples "$SAMPLES" --output_path "$HERE/results/$name"
  echo "$name: independent, $SAMPLES samples per prompt, in $(( $(date +%s) - start )) s" | tee -a "$HERE/run.log"
done
