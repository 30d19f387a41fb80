"""Crash-safe resume without pickle: safetensors + JSON state, bit-identical with dropout, and never
an unpickled file (a planted ``resume.pt`` must not run)."""
import ast
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from stages import paths

from stages.pipeline import generate, train
from checkpoint_helpers import listed_steps
from stages.io.checkpoints import step_file
from stages.params import validate_params
from stages.training import loop, resume
from conftest import tiny_params

ROOT = Path(__file__).resolve().parents[1]
TASK, LEVEL, MODEL, SEED = "copy", "easy", "p405k", 0
RID = f"{TASK}-{LEVEL}-{MODEL}-s{SEED}"


class Crash(Exception):
    pass


class Planted:
    """Unpickling this writes ``marker``: what any pickle in the partial directory could do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('unpickled')",)


def dropout_params(base: dict):
    p = tiny_params(base)
    p["train"]["defaults"]["dropout"] = 0.1
    return validate_params(p)


def partial_dir() -> Path:
    return paths.checkpoint_dir(RID).with_name(f".{RID}.partial")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one torch thread for the whole module, so that a run and its resumption (and the
    module's shared reference run) compute with the same thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, repo_params, one_thread):
    """Built once for the module, in a directory of its own: the dataset; the bytes of one uninterrupted
    run with dropout (the reference every resumed or restarted run must equal); and the partial
    directories that a crash at the 3rd and at the 4th checkpoint save leaves (copied into a test that
    starts from a crashed run; test_resume_with_dropout_is_bit_identical crashes a run itself)."""
    root = tmp_path_factory.mktemp("resume")
    (root / "params.yaml").write_text(yaml.safe_dump(tiny_params(repo_params)))
    params = dropout_params(repo_params)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        generate.main(["--task", TASK, "--level", LEVEL])
        train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
        reference = outputs()
        clear_outputs()
        for n in (3, 4):
            original = crash_at_checkpoint(mp, n)
            with pytest.raises(Crash):
                train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
            mp.setattr(loop, "save_state", original)
            partial_dir().rename(root / f"crashed-at-{n}")
    return {"root": root, "reference": reference}


@pytest.fixture
def params(workdir, repo_params, shared):
    shutil.copytree(shared["root"] / paths.DATA, workdir / paths.DATA)  # the generated dataset
    return dropout_params(repo_params)


def crashed(shared, n: int) -> None:
    """This test's run as a crash at the ``n``-th checkpoint save left it (a copy of the shared one)."""
    shutil.copytree(shared["root"] / f"crashed-at-{n}", partial_dir())


def outputs() -> dict:
    """Every byte the train stage leaves: checkpoints (weights), manifest and history."""
    ckpt = paths.checkpoint_dir(RID)
    files = {p.name: p.read_bytes() for p in sorted(ckpt.iterdir())}
    files["history.csv"] = paths.history_file(RID).read_bytes()
    return files


def clear_outputs():
    import shutil

    shutil.rmtree(paths.checkpoint_dir(RID))
    paths.history_file(RID).unlink()


def crash_at_checkpoint(monkeypatch, n: int):
    """Make the ``n``-th checkpoint save raise: the resume state of checkpoint ``n - 1`` stays."""
    original, calls = loop.save_state, {"n": 0}

    def save(model, path):
        calls["n"] += 1
        if calls["n"] == n:
            raise Crash("simulated crash")
        original(model, path)

    monkeypatch.setattr(loop, "save_state", save)
    return original


def test_resume_with_dropout_is_bit_identical(params, monkeypatch, shared):
    reference = shared["reference"]
    steps = json.loads(reference["manifest.json"])["steps"]
    assert len(steps) == 6 and json.loads(reference["manifest.json"])["train"]["dropout"] == 0.1

    original = crash_at_checkpoint(monkeypatch, 4)
    with pytest.raises(Crash):
        train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
    state = json.loads((partial_dir() / "resume.json").read_text())
    assert state["step"] == steps[2] and len(state["history"]) == 3
    assert len(state["rng"]["cpu"]) == torch.get_rng_state().numel()
    assert not paths.checkpoint_dir(RID).exists()

    monkeypatch.setattr(loop, "save_state", original)
    torch.manual_seed(12345)  # the process RNG state at restart must not matter
    train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
    resumed = outputs()
    assert resumed.keys() == reference.keys()
    for name in reference:
        if name != "manifest.json":
            assert resumed[name] == reference[name], f"{name} differs after resuming"
    assert not partial_dir().exists()
    assert sorted(p.name for p in paths.checkpoint_dir(RID).iterdir()) == sorted(
        [step_file(".", s).name for s in steps] + ["manifest.json"])  # no resume files left in the output


def test_a_planted_pickle_never_runs(params, capsys, tmp_path, shared):
    marker = tmp_path / "MARKER"
    crashed(shared, 3)
    planted = pickle.dumps(Planted(marker))
    (partial_dir() / "resume.pt").write_bytes(planted)
    (partial_dir() / "resume.json").write_bytes(planted)  # not even under the new name
    capsys.readouterr()

    manifest = train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
    assert not marker.exists()
    assert listed_steps(paths.checkpoint_dir(RID)) == manifest["steps"]
    assert not (paths.checkpoint_dir(RID) / "resume.pt").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert any("resume.pt" in line for line in err) and any("resume.json" in line for line in err), err


def test_torn_state_starts_over_with_one_warning(params, capsys, shared):
    reference = shared["reference"]
    for damage in ("truncate-tensors", "drop-tensors", "bad-json", "wrong-shape"):
        crashed(shared, 4)
        state_file = partial_dir() / "resume.json"
        state = json.loads(state_file.read_text())
        tensors = partial_dir() / state["tensors"]
        if damage == "truncate-tensors":
            tensors.write_bytes(tensors.read_bytes()[:1000])
        elif damage == "drop-tensors":
            tensors.unlink()
        elif damage == "bad-json":
            state_file.write_text(state_file.read_text()[:50])
        else:
            from safetensors.torch import load_file, save_file

            t = load_file(str(tensors))
            t["model/wpe.weight"] = t["model/wpe.weight"][:2].contiguous()
            save_file(t, str(tensors), metadata={"nonce": state["nonce"]})
        capsys.readouterr()
        train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "resume.json" in err[0] and "starts over" in err[0], (damage, err)
        result = outputs()
        assert all(result[k] == reference[k] for k in reference if k != "manifest.json"), damage
        clear_outputs()


def test_other_errors_are_not_swallowed(params, monkeypatch, shared):
    crashed(shared, 3)

    def boom(*args, **kwargs):
        raise MemoryError("not a torn file")

    monkeypatch.setattr(resume, "load_file", boom)
    with pytest.raises(MemoryError):
        train.run(TASK, LEVEL, MODEL, SEED, params, progress=False)


# ---- no unpickling anywhere in stages/ (the source is parsed, not grepped) ----

UNPICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "joblib", "shelve", "marshal"}
# (file, identifier) pairs allowed to mention pickle: the Dask executor ships *its own code* to workers
# with cloudpickle (serialisation of functions for Dask, never loading a file).
ALLOWED = {("stages/cluster/execute.py", "cloudpickle"), ("stages/cluster/execute.py", "register_pickle_by_value")}


def unpickling_uses(source: str, where: str = "<source>") -> list[str]:
    found = []
    if "weights_only=False" in "".join(source.split()):
        found.append(f"{where}: weights_only=False")
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        for name in names:
            root = name.split(".")[0]
            if ("pickle" in name.lower() or root in UNPICKLERS) and (where, name) not in ALLOWED:
                found.append(f"{where}:{node.lineno}: {name}")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            kw = {k.arg: k.value for k in node.keywords}
            if "weights_only" in kw and not (isinstance(kw["weights_only"], ast.Constant) and kw["weights_only"].value is True):
                found.append(f"{where}:{node.lineno}: weights_only not True")
            if called == "load" and isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "torch" \
                    and "weights_only" not in kw:
                found.append(f"{where}:{node.lineno}: torch.load without weights_only=True")
            if "allow_pickle" in kw and not (isinstance(kw["allow_pickle"], ast.Constant) and kw["allow_pickle"].value is False):
                found.append(f"{where}:{node.lineno}: allow_pickle")
    return found


def test_the_scanner_catches_the_old_code():
    old = "import torch\nstate = torch.load(resume, map_location=dev, weights_only=False)\n"
    assert unpickling_uses(old)
    assert unpickling_uses("import torch\nx = torch.load(p)\n")
    assert unpickling_uses("import pickle\nx = pickle.loads(b)\n")
    assert unpickling_uses("from pandas import read_pickle\n")
    assert unpickling_uses("import numpy as np\nx = np.load(p, allow_pickle=True)\n")
    assert not unpickling_uses("import torch\nx = torch.load(p, weights_only=True)\n# pickle in a comment\n")


def test_no_unpickling_in_stages():
    found = []
    for path in sorted((ROOT / "stages").rglob("*.py")):
        found += unpickling_uses(path.read_text(), path.relative_to(ROOT).as_posix())
    assert not found, found
