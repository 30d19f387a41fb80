"""Write the headline result table, generated from ``metrics/paper.csv``, between its markers.

    python scripts/readme_results.py [FILE ...]          # rewrite (default: README.md)
    python scripts/readme_results.py --check [FILE ...]  # exit 1 if a file's table is not current

The table sits between ``<!-- results:begin -->`` and ``<!-- results:end -->``; nothing else in the
file changes. ``metrics/paper.csv`` is written by stage ``events`` (stages/analysis/paper.py), so the
table follows the committed metrics and is never copied by hand (tests/test_readme_results.py).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
COLUMNS = (("claim", "claim"), ("measure", "measure"), ("grouping", "grouping"), ("paper", "paper"),
           ("this_run", "this pipeline (95% interval)"), ("verdict", "verdict"))


def table(paper_csv: Path) -> str:
    """The Markdown table of ``paper_csv``: one row per claim, measure and grouping."""
    with open(paper_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    out = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [(row[key] or "-").replace("|", "\\|") for key, _ in COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def render(text: str, generated: str, where: str = "file") -> str:
    """``text`` with the part between the markers replaced by ``generated``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"error: {where} must hold {BEGIN} and then {END}, once each")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{generated}\n{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=[str(ROOT / "README.md")])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is not current")
    parser.add_argument("--metrics", default=str(ROOT / "metrics" / "paper.csv"))
    args = parser.parse_args(argv)
    generated = table(Path(args.metrics))
    stale = []
    for name in args.files:
        path = Path(name)
        text = path.read_text()
        new = render(text, generated, name)
        if new != text:
            stale.append(name)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"error: the result table of {', '.join(stale)} is not current: python scripts/readme_results.py "
              + " ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
