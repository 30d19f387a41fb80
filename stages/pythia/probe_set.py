"""The probe set and the chance-corrected accuracy of the Pythia branch, shared by stage
``pythia_measure`` and the monitor's checkpoint-folder command (library code: no stage imports)."""
from __future__ import annotations

import pandas as pd

from stages.errors import PipelineError
from stages.pythia.paths import EVALS_FILE


def probe_set(items: pd.DataFrame, per_set: int) -> pd.DataFrame:
    """First ``per_set`` items of every set with a context, interleaved across sets (so the probe's
    train/test split by row mixes sets); ``label`` codes the right answer. A ``per_set`` larger than
    a set is an error naming ``pythia.probe_per_set``, not a silently smaller probe set."""
    with_context = items[items["context"] != ""]
    sizes = with_context.groupby("eval_set").size()
    if len(sizes) and per_set > sizes.min():
        raise PipelineError(f"'pythia.probe_per_set' = {per_set} exceeds the {sizes.min()} items of evaluation set "
                            f"'{sizes.idxmin()}' (in {EVALS_FILE}; raise 'pythia.evals.n_per_set' or lower it)")
    probe = with_context[with_context["item"] < per_set].sort_values(["item", "eval_set"])
    probe = probe.reset_index(drop=True)
    answers = [c[a] for c, a in zip(probe["choices"], probe["answer"])]
    codes = {a: i for i, a in enumerate(sorted(set(answers)))}
    return probe.assign(label=[codes[a] for a in answers])


def chance_corrected(accuracy, chance):
    """``(accuracy - chance) / (1 - chance)``: 0 at chance, 1 at perfect, negative below chance."""
    return (accuracy - chance) / (1 - chance)
