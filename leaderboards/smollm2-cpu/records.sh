#!/usr/bin/env bash
# Run records for SmolLM2-135M-Instruct base, soft and hard (after run.sh, transfer.sh,
# run_1000.sh, offline.sh and exact.sh) and the retention-aware soft-retain and hard-retain
# (after retain.sh), the adapters' model cards, the rendered leaderboard, and the trade-off
# table and plot (tradeoff.md). The numeric sampling tasks come from run_1000.sh (1000 samples
# per prompt for the adapters, 200 for the base model); the likelihood, open-ended and MCQ tasks from run.sh and transfer.sh;
# the offline retention suite and NoveltyBench-lite from offline.sh (those of its runs that exist);
# the sample-free tasks from exact.sh.
#
#   bash leaderboards/smollm2-cpu/records.sh        # from the repository root
set -euo pipefail
shopt -s nullglob
HERE=leaderboards/smollm2-cpu
for system in base soft hard; do
  type="fine-tuned adapter"; drift=(); sampling=$HERE/results_1000/$system
  [ "$system" = base ] && type=instruct && sampling=$HERE/results_200/base
  [ "$system" = base ] || drift=(--drift "$HERE/results/drift.json" --adapter "$HERE/adapters/$system")
  # run.sh's 50-sample sampling runs are superseded by run_1000.sh's: leave them out.
  mapfile -t others < <(grep -L '"calbench_numeric_unseen":' "$HERE"/results/$system/*/results_*.json)
  offline=("$HERE"/results_offline/$system/*/results_*.json)
  exact=("$HERE"/results_exact/$system/*/results_*.json)
  calbench leaderboard add "smollm2-135m-instruct-$system" --type "$type" "${drift[@]}" \
    --command "bash $HERE/run.sh && bash $HERE/transfer.sh && bash $HERE/run_1000.sh && bash $HERE/offline.sh && bash $HERE/exact.sh   # system: $system" \
    "$sampling"/*/results_*.json "${others[@]}" "${offline[@]}" "${exact[@]}"
done
# The retention-aware adapters (retain.sh): every evaluation of each is under results_retain/.
for method in soft hard; do
  system=$method-retain; out=$HERE/results_retain/$system
  calbench leaderboard add "smollm2-135m-instruct-$system" --type "fine-tuned adapter" \
    --drift "$out/drift.json" --adapter "$HERE/adapters/$system" \
    --command "bash $HERE/retain.sh $method" "$out"/*/results_*.json
done
for adapter in soft hard soft-retain hard-retain; do
  calbench leaderboard card "$HERE/adapters/$adapter" "smollm2-135m-instruct-$adapter" smollm2-135m-instruct-base
done
calbench leaderboard render
# Calibration gained against retention lost, one point per adapter: tradeoff.md, plots/tradeoff.png.
retention_run() { grep -l '"calbench_arithmetic":' "$HERE"/$1/*/results_*.json | tail -1; }
calbench leaderboard tradeoff smollm2-135m-instruct-base "$(retention_run results_offline/base)" \
  --adapter smollm2-135m-instruct-soft "$(retention_run results_offline/soft)" \
  --adapter smollm2-135m-instruct-hard "$(retention_run results_offline/hard)" \
  --adapter smollm2-135m-instruct-soft-retain "$(retention_run results_retain/soft-retain)" \
  --adapter smollm2-135m-instruct-hard-retain "$(retention_run results_retain/hard-retain)" \
  --output "$HERE"
