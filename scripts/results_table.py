"""Print the per-level results of an `events` run as a Markdown table (the README's own table is scripts/readme_results.py's, from metrics/paper.csv).

    python scripts/results_table.py [data/events]

Reads ``levels.json`` and ``runs.csv`` written by stage ``events``; every number comes with its 95%
bootstrap interval and count.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd


def fmt(ci: dict | None, percent: bool = False) -> str:
    if not ci or ci.get("value") is None:
        return "-"
    f = (lambda v: f"{100 * v:.0f}%") if percent else (lambda v: f"{v:.3g}")
    inner = "" if ci.get("low") is None else f" [{f(ci['low'])}, {f(ci['high'])}]"
    return f"{f(ci['value'])}{inner}"


def main(folder: str = "data/events") -> None:
    folder = Path(folder)
    levels = json.loads((folder / "levels.json").read_text())["by_level"]
    runs = pd.read_csv(folder / "runs.csv")
    print("| level | runs | acquired | precursor, centred | precursor, raw | median lead (share of acq. step), centred "
          "| floor raw / centred (median) | top-down | LLC precursor | Hessian precursor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for level, s in levels.items():
        m = s.get("measures", {})
        raw_floor = runs[(runs["level"] == level) & (runs["measure"] == "rankme")]["floor"].median()
        print(f"| {level} | {s['runs']} | {s['acquired']} | {fmt(m.get('rankme_centred', {}).get('precursor_rate'), True)} "
              f"| {fmt(m.get('rankme', {}).get('precursor_rate'), True)} | {fmt(s['median_lead_fraction'])} "
              f"| {raw_floor:.3g} / {fmt(s['median_floor'])} | {fmt(s['top_down_rate'], True)} "
              f"| {fmt(m.get('llc', {}).get('precursor_rate'), True)} "
              f"| {fmt(m.get('hessian_top1', {}).get('precursor_rate'), True)} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
