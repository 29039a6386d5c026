#!/usr/bin/env bash
# Retention-aware adapters for SmolLM2-135M-Instruct (issue 17's demonstration): soft + retain
# and hard + retain, trained at the published adapters' compute (60 optimizer steps, batch 8,
# effective batch 16, seed 11: the same examples in the same order) with --retain-weight
# RETAIN_WEIGHT (KL(base || tuned) on training/retain.py's generic instructions, 4 texts per
# forward), then evaluated like the published soft and hard adapters:
#   * the numeric sampling tasks at 1000 samples per prompt (calibration score, PIT metrics);
#   * the offline retention suite (calbench_retention_offline);
#   * MCQ answer balance and format following (60 generations) and open-ended generation (20);
#   * the sample-free tasks (calbench_numeric_{unseen,heldout}_exact);
#   * drift to the base model (calbench drift).
# One method per call, so two can run side by side (OMP_NUM_THREADS=1 each on 2 cores):
#
#   bash leaderboards/smollm2-cpu/retain.sh soft    # from the repository root
#   bash leaderboards/smollm2-cpu/retain.sh hard
#
# STAGES picks what runs (default: train sampling retention mcq exact drift).
set -euo pipefail
HERE=leaderboards/smollm2-cpu
METHOD=${1:?usage: retain.sh soft|hard}
RETAIN_WEIGHT=${RETAIN_WEIGHT:-10}
STAGES=${STAGES:-train sampling retention mcq exact drift}
SYSTEM=$METHOD-retain
ADAPTER=$HERE/adapters/$SYSTEM
OUT=$HERE/results_retain/$SYSTEM
BASE=$(calbench models path smollm2-135m-instruct)
args="pretrained=$BASE,dtype=float32,peft=$ADAPTER"
timed() {  # timed LABEL CMD...: run CMD, log its wall time
  local label=$1 start; shift; start=$(date +%s)
  "$@"
  echo "$SYSTEM $label: $(( $(date +%s) - start )) s" | tee -a "$HERE/retain.log"
}
for stage in $STAGES; do
  case $stage in
    train)
      timed train calbench train --method "$METHOD" --model smollm2-135m-instruct --output "calbench_runs/smollm2-$SYSTEM" \
        --max-steps 60 --batch-size 8 --effective-batch 16 --save-steps 20 --use-cpu --retain-weight "$RETAIN_WEIGHT"
      rm -rf "$ADAPTER" && mkdir -p "$HERE/adapters" && cp -r "calbench_runs/smollm2-$SYSTEM/adapter" "$ADAPTER"
      # The base model's tokenizer files (3.5 MB) are not needed to load the adapter: not kept.
      rm -f "$ADAPTER"/tokenizer.json "$ADAPTER"/tokenizer_config.json "$ADAPTER"/chat_template.jinja ;;
    sampling)
      timed "1000 samples" calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples 1000 \
        --tasks calbench_numeric_unseen,calbench_numeric_heldout --output_path "$OUT" ;;
    retention)
      timed retention calbench eval --model calbench-hf --model_args "$args" --apply_chat_template \
        --tasks calbench_retention_offline --output_path "$OUT" ;;
    mcq)
      timed mcq calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples 60 \
        --tasks calbench_mcq_balance --output_path "$OUT"
      timed open-ended calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples 20 \
        --tasks calbench_open_ended --output_path "$OUT" ;;
    exact)
      timed exact calbench eval --model calbench-hf --model_args "$args" --apply_chat_template \
        --tasks calbench_numeric_unseen_exact,calbench_numeric_heldout_exact --output_path "$OUT" ;;
    drift)
      timed drift calbench drift --model "$BASE" --adapter "$ADAPTER" --output "$OUT/drift.json" ;;
    *) echo "retain.sh: unknown stage '$stage'" >&2; exit 2 ;;
  esac
done
