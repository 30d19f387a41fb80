"""``runtime.threads``: one validated setting, applied by every computing stage, tracked by DVC."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from stages.errors import PipelineError
from stages.params import validate_params
from stages.runtime import set_threads

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["train", "extract", "measure", "landscape", "pythia_measure", "train_suite", "events"]


def blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.fixture
def keep_threads():
    from threadpoolctl import threadpool_limits
    before = torch.get_num_threads()
    with threadpool_limits(limits=None):  # restores the BLAS limits on exit
        yield
    torch.set_num_threads(before)


def with_runtime(repo_params, runtime):
    params = {**repo_params, "runtime": runtime}
    if runtime is ...:
        del params["runtime"]
    return validate_params(params)


def test_set_threads(keep_threads, repo_params):
    assert set_threads(with_runtime(repo_params, {"threads": 3})) == 3 and torch.get_num_threads() == 3
    assert blas_threads() == {3}  # numpy/scipy BLAS too: OpenBLAS would start one thread per core
    assert set_threads(with_runtime(repo_params, {"threads": 1})) == 1 and torch.get_num_threads() == 1
    assert blas_threads() == {1}


PATHS_WARNING = ("warning: torch computes on AVX512, not AVX2: results will differ in the last bits from a run on "
                 "the pinned CPU code paths (stages/numerics.py)")


@pytest.mark.parametrize("fails", [False, True])
def test_paths_warning_follows_the_output_and_not_bad_input(keep_threads, repo_params, monkeypatch, capsys, fails):
    """Off the pinned CPU code paths a stage warns once, after its output; a report of bad input stays one line."""
    import stages.runtime
    from stages.errors import main_guard

    monkeypatch.setattr(stages.runtime, "mismatches", lambda effect, pinned: ["torch computes on AVX512, not AVX2"])
    monkeypatch.setattr(stages.runtime, "pinned_environment", lambda: {"MKL_CBWR": "COMPATIBLE"})
    portable = {"threads": 1, "cpu_paths": "portable"}

    @main_guard
    def main():
        set_threads(with_runtime(repo_params, portable))
        print("computed", file=sys.stderr)
        if fails:
            raise PipelineError("missing table: data/x.csv")

    if fails:
        with pytest.raises(SystemExit):
            main()
        assert capsys.readouterr().err == "computed\nerror: missing table: data/x.csv\n"
    else:
        main()
        assert capsys.readouterr().err == f"computed\n{PATHS_WARNING}\n"
    set_threads(with_runtime(repo_params, portable))  # outside a stage's main: at once
    assert capsys.readouterr().err == f"{PATHS_WARNING}\n"
    set_threads(with_runtime(repo_params, {"threads": 1}))  # native: no paths are expected, nothing said
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("runtime", [..., {}, {"threads": 0}, {"threads": 2, "cpu_paths": "fast"},
                                     {"threads": 2, "cpu_paths": None}, {"threads": -2}, {"threads": "2"}, {"threads": 1.5},
                                     {"threads": True}, {"threads": None}])
def test_bad_threads_are_named(keep_threads, repo_params, runtime):
    """The schema checks ``runtime.threads`` when a stage loads params.yaml, before set_threads runs."""
    with pytest.raises(PipelineError, match="runtime.threads|runtime.cpu_paths|'runtime'"):
        with_runtime(repo_params, runtime)


def test_bad_cpu_paths_is_one_line_naming_the_choices(repo_params):
    with pytest.raises(PipelineError) as err:
        with_runtime(repo_params, {"threads": 2, "cpu_paths": "fast"})
    assert str(err.value) == "params.yaml: unknown runtime.cpu_paths 'fast' (choose from: native, portable)"


def test_params_yaml_sets_it(repo_params):
    threads = repo_params["runtime"]["threads"]
    assert isinstance(threads, int) and threads > 0
    assert repo_params["runtime"]["cpu_paths"] == "native"  # fast by default; portable for audits
    assert list(repo_params).index("runtime") <= 2  # near the top, with the grid


def _main(module: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / "stages" / "pipeline" / f"{module}.py").read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")


@pytest.mark.parametrize("module", STAGES)
def test_every_stage_main_sets_threads_before_its_work(module):
    """Each stage that computes with torch runs behind ``@stage(...)`` with its threads applied
    (stages/pipeline/__init__.py: arguments, params, then set_threads, before the stage's own work)."""
    decorators = [ast.unparse(d) for d in _main(module).decorator_list]
    assert len(decorators) == 1 and decorators[0].startswith("stage(") and "threads=False" not in decorators[0], decorators


def test_the_stage_entry_sets_threads_after_params_and_before_the_work(workdir, monkeypatch):
    from stages import pipeline, runtime

    calls = []
    monkeypatch.setattr(runtime, "set_threads", lambda params: calls.append(("threads", params.runtime.threads)))

    @pipeline.stage("task")
    def main(args, params):
        calls.append(("work", args.task))

    main(["--task", "copy"])
    assert calls == [("threads", 2), ("work", "copy")]


@pytest.mark.parametrize("stage", STAGES)
def test_dvc_tracks_runtime(stage):
    from stages.code_manifest import manifest

    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"][stage]
    script = spec["cmd"].rpartition(".")[2]
    assert "runtime" in spec["params"] and f"data/code/{script}.json" in spec["deps"]
    assert "stages/runtime.py" in manifest(script)


@pytest.mark.parametrize("landscape_threads,expected", [(0, 2), (1, 1)])
def test_landscape_threads_overrides_when_nonzero(keep_threads, workdir, landscape_threads, expected):
    from stages.pipeline import landscape

    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["runtime"]["threads"] = 2
    params["landscape"]["threads"] = landscape_threads
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    torch.set_num_threads(3)
    with pytest.raises(SystemExit):  # no checkpoints in the empty workdir: fails right after the threads are set
        landscape.main(["--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "0"])
    assert torch.get_num_threads() == expected


def test_check_reproducible_script_is_valid_bash():
    script = ROOT / "scripts" / "check_reproducible.sh"
    assert script.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "git clone" in text and "scripts/compare_results.py" in text and "Main job" in text


def test_rerun_outcomes_script_checks_its_arguments():
    script = ROOT / "scripts" / "rerun_outcomes.sh"
    assert script.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(script)], check=True)
    done = subprocess.run([str(script), "copy", "easy"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == "usage: scripts/rerun_outcomes.sh TASK LEVEL MODEL SEED N"


@pytest.mark.parametrize("module", STAGES)
def test_every_stage_prepares_its_environment_before_numpy_and_torch_load(module):
    """stages.runtime.prepare, under ``if __name__ == "__main__"``, before the module's first import of
    anything but ``__future__`` (its environment acts only before numpy and torch load)."""
    tree = ast.parse((ROOT / "stages" / "pipeline" / f"{module}.py").read_text())
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    body = [n for n in body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    guard = body[0]
    assert isinstance(guard, ast.If) and ast.unparse(guard.test) == "__name__ == '__main__'", module
    assert [ast.unparse(n) for n in guard.body] == ["from stages.runtime import prepare", "prepare()"], module
