#!/usr/bin/env bash
# Run records of the protocol runs (after run.sh): one record per system under
# leaderboards/results/protocols/, its stored samples beside it, then the rendered leaderboard
# (calbench leaderboard render writes the protocol table, its CSV and the protocol-gap plot,
# and splices the table into the README).
#
#   bash leaderboards/protocols-cpu/records.sh      # from the repository root
set -euo pipefail
HERE=leaderboards/protocols-cpu
for system in oracle collapsed base soft hard; do
  case $system in
    oracle|collapsed) name=$system; type=reference ;;
    base) name=smollm2-135m-instruct-base; type=instruct ;;
    *) name=smollm2-135m-instruct-$system; type="fine-tuned adapter" ;;
  esac
  calbench leaderboard add "$name" --type "$type" --results-dir leaderboards/results/protocols \
    --command "bash $HERE/run.sh   # system: $system" "$HERE"/results/$system/*/results_*.json
done
calbench leaderboard render
