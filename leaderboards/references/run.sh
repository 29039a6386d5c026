#!/usr/bin/env bash
# The reference rows: an exact sampler (calbench-oracle, which also answers the likelihood
# tasks with the exact target probabilities and the sample-free tasks with the law on its
# canonical space) and a collapsed one (calbench-collapsed, always the mode), on the unseen
# and held-out numeric tasks at the paper's 1000 samples per prompt.
#
#   bash leaderboards/references/run.sh             # from the repository root
set -euo pipefail
HERE=leaderboards/references
calbench eval --model calbench-oracle --tasks calbench_numeric_unseen,calbench_numeric_heldout \
  --output_path "$HERE/results/oracle"
calbench eval --model calbench-oracle --tasks calbench_numeric_unseen_likelihood,calbench_numeric_heldout_likelihood \
  --output_path "$HERE/results/oracle"
calbench eval --model calbench-collapsed --tasks calbench_numeric_unseen,calbench_numeric_heldout \
  --output_path "$HERE/results/collapsed"
for model in oracle collapsed; do
  calbench eval --model "calbench-$model" --tasks calbench_numeric_unseen_exact,calbench_numeric_heldout_exact \
    --output_path "$HERE/results/$model"
done
calbench leaderboard add oracle --type reference --command "bash $HERE/run.sh" "$HERE"/results/oracle/*/results_*.json
calbench leaderboard add collapsed --type reference --command "bash $HERE/run.sh" "$HERE"/results/collapsed/*/results_*.json
# The run records keep every valid sample (6 significant digits); the per-sample logs
# (several MB of exact draws and repeated prompts) are not kept.
find "$HERE/results" -name 'samples_*.jsonl' -delete
