"""Stage ``generate``: one task at one difficulty level -> ``data/datasets/<task>-<level>/``.

Writes ``train.parquet`` and ``test.parquet`` (columns ``prompt`` and ``answer``, lists of token
ids; the prompt ends with the ``=`` separator) and ``meta.json`` (vocabulary, lengths, knobs).
"""
from __future__ import annotations


from stages import paths
from stages.cli import stage_arguments
from stages.config import get, grid_settings, load_params, positive_int
from stages.errors import PipelineError, main_guard
from stages.io.datasets import write_dataset
from stages.tasks import LEVELS, build_dataset, get_task
from stages.tasks.dataset import Dataset


def generate(task: str, level: str, params: dict) -> Dataset:
    get_task(task)
    if level not in LEVELS:
        raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
    grid_settings(params)
    knobs = get(params, f"tasks.{task}.{level}")
    seed = get(params, "datasets.seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise PipelineError(f"'datasets.seed' must be an integer, got {seed!r}")
    n_train = positive_int(get(params, "datasets.n_train"), "datasets.n_train")
    n_test = positive_int(get(params, "datasets.n_test"), "datasets.n_test")
    return build_dataset(task, level, knobs, seed, n_train, n_test)


@main_guard
def main(argv=None) -> None:
    args = stage_arguments(__doc__, argv, "task", "level")
    ds = generate(args.task, args.level, load_params(args.params))
    out = paths.dataset_dir(args.task, args.level)
    write_dataset(ds, out)
    print(f"{out}: {len(ds.train_prompt)} train, {len(ds.test_prompt)} test, vocab {ds.vocab_size}")


if __name__ == "__main__":
    main()
