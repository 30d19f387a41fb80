"""``dvc params diff`` / ``dvc metrics diff`` between the root pipeline and a study, in one revision.

    python -m studies.diff scale                  # params, then metrics: root (default grid) vs studies/scale
    python -m studies.diff scale --metrics        # metrics only (--params: params only)
    python -m studies.diff scale --all --md       # unchanged entries too, as Markdown
    python -m studies.diff scale --rev HEAD~3     # both sides as committed at that revision

DVC's own diff commands compare one file across two revisions; the default grid and a study are two
files of the same revision (``params.yaml`` and ``studies/<name>/params.yaml``, ``metrics/summary.json``
and ``studies/<name>/metrics/summary.json``). This reads both with DVC's API (``Repo.params.show``,
``Repo.metrics.show``: the same loaders ``dvc params diff`` uses), diffs them with DVC's diff
(``dvc.utils.diff``) and prints DVC's table (``dvc.compare.show_diff``), columns "default" and the
study's name. Between two revisions of one side, DVC's commands work as they are:
``dvc params diff --targets studies/scale/params.yaml`` and ``dvc metrics diff --targets
studies/scale/metrics/summary.json``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = "params.yaml"
METRICS = "metrics/summary.json"


def _one_rev(shown: dict, rev: str | None) -> dict:
    """``{path: {"data": ...}}`` of the single revision in a ``Repo.*.show`` result."""
    if rev is not None and rev in shown:
        entry = shown[rev]
    else:
        if len(shown) != 1:
            raise SystemExit(f"error: expected one revision from DVC, got {', '.join(map(repr, shown))}")
        entry = next(iter(shown.values()))
    if entry.get("error"):
        raise SystemExit(f"error: DVC could not read revision {rev or 'workspace'}: {entry['error']}")
    return entry.get("data", {})


def pair_diff(kind: str, study: str, rev: str | None = None, with_unchanged: bool = False) -> dict:
    """DVC's diff of the root's file against the study's (``kind``: "params" or "metrics"), keyed by
    the root-relative name of the file (``params.yaml`` / ``metrics/summary.json``)."""
    from dvc.repo import Repo
    from dvc.utils.diff import diff, format_dict

    name = PARAMS if kind == "params" else METRICS
    other = f"studies/{study}/{name}"
    for path in (name, other):
        if rev is None and not (ROOT / path).is_file():
            raise SystemExit(f"error: missing file: {path} (run the pipeline that writes it first)")
    with Repo(str(ROOT)) as repo:
        show = repo.params.show if kind == "params" else repo.metrics.show
        shown = show(targets=[name, other], revs=[rev] if rev else None, hide_workspace=rev is not None)
    data = _one_rev(shown, rev)

    def entry(path):
        found = data.get(path) or data.get(str(ROOT / path)) or {}
        if "error" in found:
            raise SystemExit(f"error: DVC could not read {path}: {found['error']}")
        return {name: {"data": format_dict(found.get("data", {}))}}

    return diff(entry(name), entry(other), with_unchanged=with_unchanged)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", help="study name (studies/<name>/)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--params", action="store_true", help="params only")
    what.add_argument("--metrics", action="store_true", help="metrics only")
    parser.add_argument("--all", action="store_true", help="show unchanged entries too")
    parser.add_argument("--md", action="store_true", help="Markdown table")
    parser.add_argument("--rev", default=None, help="git revision to read both sides at (default: workspace)")
    args = parser.parse_args(argv)
    if not (ROOT / "studies" / args.study / "dvc.yaml").is_file():
        print(f"error: missing file: studies/{args.study}/dvc.yaml", file=sys.stderr)
        return 2
    from dvc.compare import show_diff

    kinds = ["params"] if args.params else ["metrics"] if args.metrics else ["params", "metrics"]
    for kind in kinds:
        result = pair_diff(kind, args.study, args.rev, args.all)
        show_diff(result, title="Param" if kind == "params" else "Metric", markdown=args.md,
                  show_changes=kind == "metrics", a_rev="default", b_rev=args.study)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
