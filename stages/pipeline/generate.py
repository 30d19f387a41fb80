"""Stage ``generate``: one task at one difficulty level -> ``data/datasets/<task>-<level>/``.

Writes ``train.parquet`` and ``test.parquet`` (columns ``prompt`` and ``answer``, lists of token
ids; the prompt ends with the ``=`` separator) and ``meta.json`` (vocabulary, lengths, knobs).
"""
from __future__ import annotations


from stages import paths
from stages.errors import PipelineError
from stages.io.datasets import write_dataset
from stages.params import Params
from stages.tasks import LEVELS, build_dataset, get_task
from stages.tasks.dataset import Dataset
from stages.pipeline import stage


def generate(task: str, level: str, params: Params) -> Dataset:
    """The dataset of ``task`` at ``level``: ``tasks.<task>.<level>`` knobs (as written in params.yaml),
    ``datasets`` seed and sizes (the schema has checked all of them)."""
    get_task(task)
    if level not in LEVELS:
        raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
    ds = params.datasets
    return build_dataset(task, level, params.tasks.knobs(task, level), ds.seed, ds.n_train, ds.n_test)


@stage("task", "level", threads=False)
def main(args, params: Params) -> None:
    ds = generate(args.task, args.level, params)
    out = paths.dataset_dir(args.task, args.level)
    write_dataset(ds, out)
    print(f"{out}: {len(ds.train_prompt)} train, {len(ds.test_prompt)} test, vocab {ds.vocab_size}")


if __name__ == "__main__":
    main()
