"""Stage ``pythia_evals``: the eight evaluation sets (seven diagnostic + logical deduction) -> Parquet.

Deterministic from ``pythia.evals.seed``: ``data/pythia/evals.parquet`` holds one row per item
(eval_set, item, context, choices, answer). See stages/pythia/grammar.py for the sets.
"""
from __future__ import annotations


from stages.errors import PipelineError
from stages.params import Evals, Params
from stages.pythia import evalsets
from stages.pythia.paths import EVALS_FILE
from stages.pipeline import stage


def build(cfg: Evals):
    """The evaluation sets of ``pythia.evals`` (``cfg``)."""
    return evalsets.generate(cfg.n_per_set, cfg.seed)


@stage(threads=False)
def main(args, params: Params) -> None:
    if params.pythia is None:
        raise PipelineError("missing key 'pythia.evals.n_per_set' (no 'pythia' under 'params')")
    frame = build(params.pythia.evals)
    evalsets.write(frame, EVALS_FILE)
    print(f"{EVALS_FILE}: {len(frame)} items in {frame['eval_set'].nunique()} sets")


if __name__ == "__main__":
    main()
