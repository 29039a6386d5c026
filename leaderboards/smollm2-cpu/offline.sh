#!/usr/bin/env bash
# Transfer and retention measured offline for SmolLM2-135M-Instruct base and its soft / hard
# adapters, with calbench-hf on a 2-core CPU:
#   * the offline retention suite (calbench_retention_offline: arithmetic, mmlu_mini,
#     format_following; greedy, nothing downloaded);
#   * NoveltyBench-lite (k = 10 generations at T = 1, 512 new tokens at most) on NoveltyBench's
#     own prompts, read from ../shared/data/noveltybench (its public prompt files, MIT; never
#     copied into this repository): all 100 curated prompts, and the first WILDCHAT (40) prompts
#     of wildchat-1k.jsonl in the file's order (the same ids for every system; 100 did not fit a
#     session here: the base model's run was projected at over an hour with other work running).
# Each (system, task set) is one lm-eval run, so results land as they finish; TASKS picks the
# sets (retention curated wildchat; "" none), SYSTEMS the systems. Then `calbench retention-delta` pairs
# each adapter's items with the base model's:
#
#   bash leaderboards/smollm2-cpu/offline.sh        # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
DATA=${DATA:-../shared/data/noveltybench}
WILDCHAT=${WILDCHAT:-40}
TASKS=${TASKS-retention curated wildchat}  # TASKS="" runs nothing: only the deltas below
SYSTEMS=${SYSTEMS:-base soft hard}
BASE=$(calbench models path smollm2-135m-instruct)
for set in $TASKS; do
  for system in $SYSTEMS; do
    args="pretrained=$BASE,dtype=float32"
    [ "$system" = base ] || args="$args,peft=$HERE/adapters/$system"
    case $set in
      retention) extra=(--tasks calbench_retention_offline) ;;
      curated) extra=(--tasks calbench_noveltybench_curated --metadata "{\"calbench_data_files\": \"$DATA/curated.jsonl\"}") ;;
      wildchat) extra=(--tasks calbench_noveltybench_wildchat
                       --metadata "{\"calbench_data_files\": \"$DATA/wildchat-1k.jsonl\", \"calbench_num_prompts\": $WILDCHAT}") ;;
    esac
    start=$(date +%s)
    calbench eval --model calbench-hf --model_args "$args" --apply_chat_template "${extra[@]}" \
      --output_path "$HERE/results_offline/$system"
    echo "$system $set: $(( $(date +%s) - start )) s" | tee -a "$HERE/offline.log"
  done
done
# Paired deltas of each adapter against the base model, on the same items: the retention
# suite (retention_delta_<adapter>.md) and NoveltyBench-lite per split (noveltybench_delta_<adapter>.md).
run_of() { grep -l "\"$2\":" "$HERE"/results_offline/"$1"/*/results_*.json 2>/dev/null | tail -1; }
deltas() {  # deltas OUT TITLE TASK...: one section per task set both runs have
  local out=$1 title=$2; shift 2
  for adapter in soft hard; do
    : > "$HERE/${out}_$adapter.md.tmp"
    for task in "$@"; do
      base=$(run_of base "$task"); tuned=$(run_of "$adapter" "$task")
      [ -n "$base" ] && [ -n "$tuned" ] || continue
      { echo "# $title: SmolLM2-135M-Instruct + $adapter adapter against the base model, paired"
        echo
        echo "\`calbench retention-delta $base $tuned\`"
        echo
        calbench retention-delta "$base" "$tuned"
        echo; } >> "$HERE/${out}_$adapter.md.tmp"
    done
    if [ -s "$HERE/${out}_$adapter.md.tmp" ]; then mv "$HERE/${out}_$adapter.md.tmp" "$HERE/${out}_$adapter.md"
    else rm "$HERE/${out}_$adapter.md.tmp"; fi
  done
}
deltas retention_delta Retention calbench_arithmetic
deltas noveltybench_delta "NoveltyBench-lite" calbench_noveltybench_curated calbench_noveltybench_wildchat
