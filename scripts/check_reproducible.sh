#!/usr/bin/env bash
# Does a fresh clone reproduce the committed results?
#
# Clones this repository's committed HEAD into a temporary directory, runs the README's main command
# there (the first line of the ```bash block after "Main job": venv, pip install, dvc repro) and
# reports whether `git status --porcelain dvc.lock metrics plots` is empty, i.e. whether the rerun
# wrote exactly the committed dvc.lock, metrics and plots. Uncommitted changes are not part of the test.
#
# Usage: scripts/check_reproducible.sh [--keep]     (--keep: leave the clone for inspection)
# Exit status: 0 reproducible, 1 outputs differ, 2 the command failed or could not be found.
# It runs the whole pipeline: expect as long as the README says `dvc repro` takes, plus installs.
set -euo pipefail

keep=0
[[ "${1:-}" == "--keep" ]] && keep=1

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
echo "running: $cmd"
if ! bash -c "set -e; $cmd" >"$tmp/run.log" 2>&1; then
    echo "FAILED: the main command exited non-zero; last lines of its log:" >&2
    tail -n 40 "$tmp/run.log" >&2
    exit 2
fi

changes=$(git status --porcelain dvc.lock metrics plots)
if [[ -z "$changes" ]]; then
    echo "REPRODUCIBLE: dvc.lock, metrics and plots are identical to the committed ones"
    exit 0
fi
echo "NOT REPRODUCIBLE: the rerun changed:"
echo "$changes"
git --no-pager diff --stat -- dvc.lock metrics plots
exit 1
