"""Every project module a stage imports (transitively, through project imports) is a dvc.yaml dep of
that stage, so editing shared code makes DVC rerun the stages that use it.

Imports are read with ``ast`` (every ``import``/``from ... import`` anywhere in the module, including
those inside functions); a dep that is a directory covers everything under it. A package's
``__init__.py`` counts only when it does more than hold a docstring.
"""
import ast
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "stages"


def module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (``a.b`` -> a/b.py or a/b/__init__.py), or None."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported_modules(name: str) -> set[str]:
    """Project modules that importing ``name`` imports directly (parent packages included)."""
    path = module_file(name)
    found: set[str] = set()

    def add(module: str) -> None:
        parts = module.split(".")
        if parts[0] != PACKAGE:
            return
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ first
            if module_file(".".join(parts[:i])):
                found.add(".".join(parts[:i]))

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(name, path).split(".")
                base = ".".join(package[:len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            add(module)
            for alias in node.names:  # ``from stages import paths``: paths may be a submodule
                if module_file(f"{module}.{alias.name}"):
                    add(f"{module}.{alias.name}")
    for parent in _parents(name):
        add(parent)
    found.discard(name)
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def closure(name: str) -> set[str]:
    """``name`` and every project module it imports, transitively."""
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(imported_modules(module) - seen)
    return seen


def needs_dep(module: str) -> bool:
    """A package ``__init__.py`` holding only a docstring changes nothing a stage computes."""
    path = module_file(module)
    if path.name != "__init__.py":
        return True
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def covered(path: str, deps: list[str]) -> bool:
    for dep in deps:
        dep = dep.rstrip("/")
        if path == dep or path.startswith(dep + "/"):
            return True
    return False


def stage_module(cmd: str) -> str | None:
    words = shlex.split(cmd)
    if "-m" in words and words[words.index("-m") + 1].startswith(f"{PACKAGE}."):
        return words[words.index("-m") + 1]
    return None


def stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def dep_paths(stage: dict) -> list[str]:
    return [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]


def missing_deps(name: str) -> list[str]:
    stage = stages()[name]
    module = stage_module(stage["cmd"])
    deps = dep_paths(stage)
    needed = {module_file(m).relative_to(ROOT).as_posix() for m in closure(module) if needs_dep(m)}
    return sorted(p for p in needed if not covered(p, deps))


STAGES = sorted(n for n, s in stages().items() if stage_module(s["cmd"]))


def test_every_stage_runs_a_project_module():
    assert STAGES and all(module_file(stage_module(stages()[n]["cmd"])) for n in STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_stage_deps_cover_its_imports(name):
    missing = missing_deps(name)
    assert not missing, f"dvc.yaml stage '{name}' imports project code its deps do not cover: {', '.join(missing)}"


def test_the_import_walk_finds_what_it_must():
    # transitive: stages.train -> stages.training.loop -> stages.io.checkpoints -> stages.io.tables
    found = closure("stages.train")
    assert {"stages.training.loop", "stages.io.checkpoints", "stages.io.tables", "stages.io.atomic",
            "stages.models", "stages.models.gpt", "stages.config", "stages.errors", "stages.paths"} <= found
    # imports inside functions count (events imports its figures lazily in main)
    assert "stages.analysis.figures" in closure("stages.events")
    assert covered("stages/training/loop.py", ["stages/training"])
    assert not covered("stages/trainingx/loop.py", ["stages/training"])
    assert not covered("stages/config.py", ["stages/train.py", "data/datasets/x"])
    assert needs_dep("stages.models") and not needs_dep("stages.training")
