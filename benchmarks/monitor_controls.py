"""Negative controls for the early-warning evaluation (benchmarks/monitor_warning.py): runs that never
acquire, trained and measured with the pipeline's own stages in a work folder.

    python benchmarks/monitor_controls.py [--out data/controls] [--seeds 0] [--mul-steps 600]

* ``copyshuffled-easy-p405k-s<seed>``: copy-easy with its answers permuted across examples (train and
  test separately), so no prompt predicts its answer: exact match stays at chance (1e-4);
* ``mul-hard-p405k-s<seed>``: mul-hard, which never acquired in 3000 steps (final exact match 0.001),
  at a budget of ``--mul-steps`` (its curve at 600 steps is the start of the 3000-step one).

Each control runs generate -> train -> extract -> measure of stages/ with the repository's
params.yaml (mul-hard's step budget replaced) inside ``OUT/work``; the measures tables land in
``OUT/measures/<control>.csv``, which monitor_warning.py reads with ``--controls OUT/measures``.
Cost (p405k, 2 threads): the shuffled copy-easy run is one copy-easy run (60 steps); mul-hard at
600 steps is about 10 copy-easy runs. Nothing here writes outside ``OUT``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402


@contextlib.contextmanager
def inside(folder: Path):
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def shuffle_answers(dataset: Path, seed: int) -> None:
    """Permute the answers of ``dataset``'s train and test splits across examples (seeded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        table = pq.read_table(dataset / f"{split}.parquet")
        order = rng.permutation(table.num_rows)
        shuffled = table.set_column(1, "answer", pa.array(table.column("answer").to_pylist(), table.schema.field(
            "answer").type).take(pa.array(order)))
        pq.write_table(shuffled, dataset / f"{split}.parquet")


def run(task: str, level: str, seed: int, shuffled: bool = False) -> Path:
    from stages import paths
    from stages.pipeline import extract, generate, measure, train
    from stages.config import run_id

    args = ["--task", task, "--level", level]
    generate.main(args)
    if shuffled:
        shuffle_answers(paths.dataset_dir(task, level), seed)
    rest = args + ["--model", "p405k", "--seed", str(seed)]
    train.main(rest)
    extract.main(rest)
    measure.main(rest)
    return paths.measures_file(run_id(task, level, "p405k", seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("data/controls"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--mul-steps", type=int, default=600)
    parser.add_argument("--only", choices=["shuffled", "mul"], default=None)
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "measures").mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"]["tasks"]["mul"]["hard"] = {**params["train"]["tasks"]["mul"]["hard"], "steps": args.mul_steps}
    for seed in args.seeds:
        for name, task, level, shuffled in (("copyshuffled-easy", "copy", "easy", True),
                                            ("mul-hard", "mul", "hard", False)):
            if args.only and (args.only == "shuffled") != shuffled:
                continue
            work = out / "work" / f"{name}-s{seed}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
            with inside(work):
                table = run(task, level, seed, shuffled)
            target = out / "measures" / f"{name}-p405k-s{seed}.csv"
            shutil.copyfile(work / table, target)
            print(target)


if __name__ == "__main__":
    main()
