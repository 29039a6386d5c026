#!/usr/bin/env bash
# Run records for SmolLM2-135M-Instruct base, soft and hard (after run.sh and transfer.sh),
# the adapters' model cards, and the rendered leaderboard.
#
#   bash leaderboards/smollm2-cpu/records.sh        # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
for system in base soft hard; do
  type="fine-tuned adapter"; drift=()
  [ "$system" = base ] && type=instruct
  [ "$system" = base ] || drift=(--drift "$HERE/results/drift.json" --adapter "$HERE/adapters/$system")
  calbench leaderboard add "smollm2-135m-instruct-$system" --type "$type" "${drift[@]}" \
    --command "bash $HERE/run.sh && bash $HERE/transfer.sh   # system: $system" \
    "$HERE"/results/$system/*/results_*.json
done
for method in soft hard; do
  calbench leaderboard card "$HERE/adapters/$method" "smollm2-135m-instruct-$method" smollm2-135m-instruct-base
done
calbench leaderboard render
