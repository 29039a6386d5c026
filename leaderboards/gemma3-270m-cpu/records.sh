#!/usr/bin/env bash
# The run record of Gemma-3-270M base (after run.sh, transfer.sh and exact.sh) and the rendered leaderboard.
#
#   bash leaderboards/gemma3-270m-cpu/records.sh    # from the repository root
set -euo pipefail
HERE=leaderboards/gemma3-270m-cpu
calbench leaderboard add gemma-3-270m-base --type base --command "bash $HERE/run.sh && bash $HERE/transfer.sh && bash $HERE/exact.sh" "$HERE"/results/base/*/results_*.json
calbench leaderboard render
