#!/usr/bin/env bash
# The sample-free tasks (calbench_numeric_{unseen,heldout}_exact: each prompt's whole answer
# distribution, enumerated; 2000 prefixes, 1% residual, 0.01 IQR resolution) for Gemma-3-270M
# base (no chat template) with calbench-hf on a 2-core CPU.
#
#   bash leaderboards/gemma3-270m-cpu/exact.sh      # from the repository root
set -euo pipefail
HERE=leaderboards/gemma3-270m-cpu
BASE=$(calbench models path gemma-3-270m)
start=$(date +%s)
calbench eval --model calbench-hf --model_args "pretrained=$BASE,dtype=float32" \
  --tasks calbench_numeric_unseen_exact,calbench_numeric_heldout_exact --output_path "$HERE/results/base"
echo "base exact: $(( $(date +%s) - start )) s" | tee -a "$HERE/exact.log"
