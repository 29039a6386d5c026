#!/usr/bin/env bash
# Gemma-3-270M (base model, no chat template: the prompt is followed by a newline and the
# answer ends at EOS) on the unseen and held-out numeric tasks, sampling and likelihood,
# with calbench-hf on a 2-core CPU (measured while other jobs shared the cores: about 25 minutes
# of sampling at 20 samples per prompt and 45 of likelihood, Gemma's vocabulary having 262k
# tokens; LIKELIHOOD=0 skips the likelihood tasks).
#
#   bash leaderboards/gemma3-270m-cpu/run.sh        # from the repository root
set -euo pipefail
HERE=leaderboards/gemma3-270m-cpu
SAMPLES=${SAMPLES:-20}          # samples per prompt for the sampling tasks (the paper: 1000)
BASE=$(calbench models path gemma-3-270m)
args="pretrained=$BASE,dtype=float32"
calbench eval --model calbench-hf --model_args "$args" --num-samples "$SAMPLES" \
  --tasks calbench_numeric_unseen,calbench_numeric_heldout --output_path "$HERE/results/base"
if [ "${LIKELIHOOD:-1}" = 1 ]; then
  calbench eval --model calbench-hf --model_args "$args" \
    --tasks calbench_numeric_unseen_likelihood,calbench_numeric_heldout_likelihood --output_path "$HERE/results/base"
fi
# The likelihood tasks' per-sample logs repeat the prompt for each of ~1000 answers: not kept.
find "$HERE/results" -name 'samples_calbench_numeric_*_likelihood_*.jsonl' -delete
