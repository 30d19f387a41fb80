"""Compare a rerun's results with the committed ones, as a user relies on them (scripts/check_reproducible.sh).

    python scripts/compare_results.py COMMITTED RERUN [--lock] [--rtol 1e-3]

``COMMITTED`` and ``RERUN`` are directories holding ``metrics/``, ``plots/`` and ``dvc.lock``:

* ``metrics/``: every file byte-identical (the verdicts, the paper table, the summary), and no file
  missing or added.
* ``plots/``: every table (``.csv``) with the same rows, columns and non-numeric cells, and each
  numeric cell within ``rtol`` (default 1e-3) of its column's largest magnitude in the committed
  table (a thousandth of the plot's range: invisible in a figure); NaN only where NaN. Figures
  (images) are not compared: they are drawn from those tables.
* ``dvc.lock`` byte-identical, only with ``--lock`` (``runtime.cpu_paths: portable``: vendor-exact
  bits; in native mode the last bits of checkpoints and tables follow the CPU).

Prints one line per difference and a verdict; exit status 0 same, 1 different.
"""
from __future__ import annotations

import argparse
import filecmp
import sys
from pathlib import Path

import numpy as np
import pandas as pd

RTOL = 1e-3


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()


def compare_metrics(committed: Path, rerun: Path) -> list[str]:
    """Every file under ``metrics/`` byte-identical, none missing or added."""
    a, b = _files(committed), _files(rerun)
    found = [f"metrics/{name}: missing in the rerun" for name in sorted(a - b)]
    found += [f"metrics/{name}: not in the committed results" for name in sorted(b - a)]
    found += [f"metrics/{name}: differs" for name in sorted(a & b)
              if not filecmp.cmp(committed / name, rerun / name, shallow=False)]
    return found


def compare_table(committed: Path, rerun: Path, rtol: float = RTOL) -> list[str]:
    """One phrase per way the ``rerun`` table differs from ``committed`` beyond ``rtol`` (see module)."""
    a, b = pd.read_csv(committed), pd.read_csv(rerun)
    if list(a.columns) != list(b.columns):
        return [f"columns {list(b.columns)} instead of {list(a.columns)}"]
    if len(a) != len(b):
        return [f"{len(b)} rows instead of {len(a)}"]
    found = []
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            x, y = x.to_numpy(np.float64), y.to_numpy(np.float64)
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                found.append(f"column {col}: NaN in other rows")
                continue
            ok = ~np.isnan(x)
            scale = np.abs(x[ok]).max() if ok.any() else 0.0
            worst = np.abs(x[ok] - y[ok]).max() if ok.any() else 0.0
            if worst > rtol * scale:
                found.append(f"column {col}: differs by up to {worst:.3g} (tolerance {rtol:g} x {scale:.3g})")
        elif not x.astype(str).equals(y.astype(str)):
            found.append(f"column {col}: other values")
    return found


def compare_plots(committed: Path, rerun: Path, rtol: float = RTOL) -> list[str]:
    a = {n for n in _files(committed) if n.endswith(".csv")}
    b = {n for n in _files(rerun) if n.endswith(".csv")}
    found = [f"plots/{name}: missing in the rerun" for name in sorted(a - b)]
    found += [f"plots/{name}: not in the committed results" for name in sorted(b - a)]
    for name in sorted(a & b):
        found += [f"plots/{name}: {phrase}" for phrase in compare_table(committed / name, rerun / name, rtol)]
    return found


def compare(committed: Path, rerun: Path, lock: bool, rtol: float = RTOL) -> list[str]:
    found = compare_metrics(committed / "metrics", rerun / "metrics")
    found += compare_plots(committed / "plots", rerun / "plots", rtol)
    if lock and not filecmp.cmp(committed / "dvc.lock", rerun / "dvc.lock", shallow=False):
        found.append("dvc.lock: differs (runtime.cpu_paths is portable: the bits must match)")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("committed", type=Path)
    parser.add_argument("rerun", type=Path)
    parser.add_argument("--lock", action="store_true", help="dvc.lock must be byte-identical (portable mode)")
    parser.add_argument("--rtol", type=float, default=RTOL, help="plot tables: tolerance, as a share of each "
                                                                 "column's largest magnitude (default 1e-3)")
    args = parser.parse_args(argv)
    found = compare(args.committed, args.rerun, args.lock, args.rtol)
    for line in found:
        print(line)
    what = "metrics identical, plot tables within " + f"{args.rtol:g}" + (", dvc.lock identical" if args.lock else "")
    print(f"NOT REPRODUCIBLE: {len(found)} difference(s)" if found else f"REPRODUCIBLE: {what}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
