#!/usr/bin/env bash
# Does a fresh clone reproduce the committed results?
#
# Clones this repository's committed HEAD into a temporary directory, keeps a copy of its committed
# metrics/, plots/ and dvc.lock, runs the README's main command there (the first line of the ```bash
# block after "Main job": venv, pip install, dvc repro) and compares what a user relies on
# (scripts/compare_results.py): every metrics/ file (verdicts, paper table, summary) byte-identical;
# every plot table with the same rows and non-numeric cells and each number within 1e-3 of its
# column's largest magnitude; dvc.lock byte-identical only when params.yaml has
# `runtime.cpu_paths: portable` (native mode computes on the CPU's own paths, whose last bits differ
# between CPUs; docs/reproducibility.md). Uncommitted changes are not part of the test.
#
# Usage: scripts/check_reproducible.sh [--keep] [--timed]
#   --keep: leave the clone for inspection
#   --timed: run the command's final `dvc repro` under benchmarks/dvc_overhead.py, which prints the
#            stage commands' time per kind of stage and DVC's bookkeeping per stage
# Exit status: 0 reproducible, 1 results differ, 2 the command failed or could not be found.
# It runs the whole pipeline: expect as long as the README says `dvc repro` takes, plus installs.
set -euo pipefail

keep=0
timed=0
for arg in "$@"; do
    case "$arg" in
        --keep) keep=1 ;;
        --timed) timed=1 ;;
        *) echo "error: unknown argument '$arg' (expected --keep, --timed)" >&2; exit 2 ;;
    esac
done

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-reproducible.XXXXXX")
cleanup() { if [[ $keep == 1 ]]; then echo "clone kept at $tmp/repo" >&2; else rm -rf "$tmp"; fi; }
trap cleanup EXIT

cmd=$(awk '/Main job/ {found=1} found && /^```bash/ {getline; print; exit}' "$repo/README.md")
if [[ -z "$cmd" ]]; then
    echo "error: no main command found in $repo/README.md (a \`\`\`bash block after 'Main job')" >&2
    exit 2
fi

git clone --quiet "$repo" "$tmp/repo"
cd "$tmp/repo"
echo "clone of $(git rev-parse --short HEAD) in $tmp/repo"
mkdir -p "$tmp/committed"
cp -r metrics plots dvc.lock "$tmp/committed/"
mode=$(awk '/^runtime:/ {r=1; next} r && /^[^ #]/ {r=0} r && $1 == "cpu_paths:" {print $2}' params.yaml)
mode=${mode:-native}
lock=()
[[ "$mode" == "portable" ]] && lock=(--lock)
echo "runtime.cpu_paths: $mode (dvc.lock compared: $([[ $mode == portable ]] && echo yes || echo no))"
if [[ $timed == 1 ]]; then
    [[ "$cmd" == *"&& dvc repro" ]] || { echo "error: --timed needs a main command ending in '&& dvc repro'" >&2; exit 2; }
    cmd="${cmd%dvc repro}python benchmarks/dvc_overhead.py --log $tmp/repro.log --json $tmp/dvc_overhead.json -- dvc repro"
fi
echo "running: $cmd"
start=$SECONDS
if ! bash -c "set -e; $cmd" >"$tmp/run.log" 2>&1; then
    echo "FAILED: the main command exited non-zero; last lines of its log:" >&2
    tail -n 40 "$tmp/run.log" >&2
    exit 2
fi

echo "the main command took $((SECONDS - start)) s (installs included)"
if [[ $timed == 1 ]]; then  # (an && list would end the script under set -e when grep finds nothing)
    grep -A 30 '^wall ' "$tmp/run.log" || echo "no timing in $tmp/run.log" >&2
fi

# the clone's own environment (the main command made it) has pandas; this script's python may not
python=python3
[[ -x .venv/bin/python ]] && python=.venv/bin/python
"$python" scripts/compare_results.py "$tmp/committed" . "${lock[@]}"
