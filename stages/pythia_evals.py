"""Stage ``pythia_evals``: the eight evaluation sets (seven diagnostic + logical deduction) -> Parquet.

Deterministic from ``pythia.evals.seed``: ``data/pythia/evals.parquet`` holds one row per item
(eval_set, item, context, choices, answer). See stages/pythia/grammar.py for the sets.
"""
from __future__ import annotations


from stages.cli import stage_arguments
from stages.config import get, load_params, positive_int
from stages.errors import main_guard
from stages.pythia import evalsets
from stages.pythia.paths import EVALS_FILE


def build(params: dict):
    n = positive_int(get(params, "pythia.evals.n_per_set"), "pythia.evals.n_per_set")
    seed = positive_int(get(params, "pythia.evals.seed"), "pythia.evals.seed", allow_zero=True)
    return evalsets.generate(n, seed)


@main_guard
def main(argv=None) -> None:
    args = stage_arguments(__doc__, argv)
    frame = build(load_params(args.params))
    evalsets.write(frame, EVALS_FILE)
    print(f"{EVALS_FILE}: {len(frame)} items in {frame['eval_set'].nunique()} sets")


if __name__ == "__main__":
    main()
