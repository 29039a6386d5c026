#!/usr/bin/env bash
# SmolLM2-135M-Instruct on a 2-core CPU: soft and hard LoRA adapters trained at equal
# compute (same steps, same batch), then base, soft and hard evaluated on the unseen and
# held-out numeric tasks (sampling and likelihood) with calbench-hf. Every result file
# under results/ comes from these commands; adapters/ holds the two adapters and cards.
#
#   bash leaderboards/smollm2-cpu/run.sh            # from the repository root
set -euo pipefail
HERE=leaderboards/smollm2-cpu
STEPS=${STEPS:-100}             # optimizer steps per method (the compute budget)
SAMPLES=${SAMPLES:-50}          # samples per prompt for the sampling tasks (the paper: 1000)
BASE=$(calbench models path smollm2-135m-instruct)

for method in soft hard; do
  calbench train --method "$method" --model smollm2-135m-instruct --output "calbench_runs/smollm2-$method" \
    --max-steps "$STEPS" --batch-size 8 --effective-batch 16 --save-steps 20 --use-cpu
  rm -rf "$HERE/adapters/$method" && mkdir -p "$HERE/adapters" && cp -r "calbench_runs/smollm2-$method/adapter" "$HERE/adapters/$method"
  # The base model's tokenizer files (3.5 MB) are not needed to load the adapter: not kept.
  rm -f "$HERE/adapters/$method"/tokenizer.json "$HERE/adapters/$method"/tokenizer_config.json "$HERE/adapters/$method"/chat_template.jinja
done

for system in base soft hard; do
  args="pretrained=$BASE,dtype=float32"
  [ "$system" = base ] || args="$args,peft=$HERE/adapters/$system"
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template --num-samples "$SAMPLES" \
    --tasks calbench_numeric_unseen,calbench_numeric_heldout --output_path "$HERE/results/$system"
  calbench eval --model calbench-hf --model_args "$args" --apply_chat_template \
    --tasks calbench_numeric_unseen_likelihood,calbench_numeric_heldout_likelihood --output_path "$HERE/results/$system"
done
# The likelihood tasks' per-sample logs repeat the prompt for each of ~1000 answers: not kept.
find "$HERE/results" -name 'samples_calbench_numeric_*_likelihood_*.jsonl' -delete
