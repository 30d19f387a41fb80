#!/usr/bin/env bash
# How many outcomes does one training stage have? Reruns it N times and counts distinct results.
#
# Runs `python -m stages.pipeline.train` for one run N times in this checkout (its datasets must exist:
# run in a clone where `dvc repro` has run, e.g. one kept by `scripts/check_reproducible.sh --keep`;
# it overwrites that run's checkpoints and history) and prints, per rerun, the md5 of the history
# CSV and of the step-1 checkpoint, then how often each came out. One line = deterministic.
#
# Usage: scripts/rerun_outcomes.sh TASK LEVEL MODEL SEED N
set -euo pipefail
if [[ $# -ne 5 ]]; then
    echo "usage: scripts/rerun_outcomes.sh TASK LEVEL MODEL SEED N" >&2
    exit 2
fi
task=$1 level=$2 model=$3 seed=$4 n=$5
run="$task-$level-$model-s$seed"
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
results=()
for i in $(seq "$n"); do
    python -m stages.pipeline.train --task "$task" --level "$level" --model "$model" --seed "$seed" >/dev/null 2>&1 \
        || { echo "error: the train stage failed for $run (rerun $i)" >&2; exit 2; }
    line="history $(md5sum < "data/history/$run.csv" | cut -c1-12) step1 $(md5sum < "data/checkpoints/$run/step_0000001.safetensors" | cut -c1-12)"
    echo "rerun $i: $line"
    results+=("$line")
done
echo "outcomes over $n reruns of $run:"
printf '%s\n' "${results[@]}" | sort | uniq -c
