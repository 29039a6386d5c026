#!/usr/bin/env bash
# Every sampling protocol (independent, and calbench/protocols.py's batch, verbalized, ssot and
# seeded) on the 42 selected prompts (calbench_numeric_quick and its protocol variants: every
# family's selected points) at 50 samples per prompt, the calibration score's reference size,
# for the two references and SmolLM2-135M-Instruct base, soft and hard, with calbench-hf on a
# 2-core CPU. One lm-eval run per (protocol, system), so each result lands as soon as it is
# done; the cheap protocols first (a seeded prompt's 50 requests each have their own context,
# so only their common prefix is; calbench-hf decodes them side by side). Then the records
# and the table:
#
#   bash leaderboards/protocols-cpu/run.sh            # from the repository root
#   bash leaderboards/protocols-cpu/records.sh
set -euo pipefail
HERE=leaderboards/protocols-cpu
ADAPTERS=leaderboards/smollm2-cpu/adapters
SAMPLES=${SAMPLES:-50}
PROTOCOLS=${PROTOCOLS:-independent batch verbalized ssot seeded}
SYSTEMS=${SYSTEMS:-oracle collapsed soft hard base}
BASE=$(calbench models path smollm2-135m-instruct)
for protocol in $PROTOCOLS; do
  task=calbench_numeric_quick; [ "$protocol" = independent ] || task=${task}_$protocol
  for name in $SYSTEMS; do
    case $name in
      oracle) args=(--model calbench-oracle) ;;
      collapsed) args=(--model calbench-collapsed) ;;
      soft|hard) args=(--model calbench-hf --model_args "pretrained=$BASE,dtype=float32,peft=$ADAPTERS/$name" --apply_chat_template) ;;
      base) args=(--model calbench-hf --model_args "pretrained=$BASE,dtype=float32" --apply_chat_template) ;;
    esac
    start=$(date +%s)
    calbench eval "${args[@]}" --tasks "$task" --num-samples "$SAMPLES" --output_path "$HERE/results/$name"
    echo "$name $protocol: $SAMPLES samples per prompt in $(( $(date +%s) - start )) s" | tee -a "$HERE/run.log"
  done
done
