"""dvc.yaml dependencies derived from the import closure: every project module a stage's script imports
(transitively) is a dep of that stage, and no other project code is.

    python scripts/dvc_deps.py            # rewrite the code deps of every stage in dvc.yaml
    python scripts/dvc_deps.py --check    # exit 1 if dvc.yaml's code deps are not what the imports say

Imports are read with ``ast`` (every ``import``/``from ... import`` anywhere in the module, including
those inside functions). A package's ``__init__.py`` counts only when it does more than hold a
docstring. Only the ``- <package>/...`` lines of each stage's ``deps:`` are rewritten (sorted, one file
each); data deps and everything else in dvc.yaml stay as written. tests/test_dvc_deps.py keeps
dvc.yaml current. After a rewrite, regenerate the study folders: ``python -m studies.generate``.
"""
from __future__ import annotations

import argparse
import ast
import re
import shlex
import sys
from pathlib import Path

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


def stages(text: str | None = None) -> dict:
    return yaml.safe_load(text if text is not None else (ROOT / "dvc.yaml").read_text())["stages"]


def dep_paths(stage: dict) -> list[str]:
    return [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]


def code_deps(module: str) -> list[str]:
    """The source files of ``module``'s import closure that a stage depends on, sorted."""
    return sorted(module_file(m).relative_to(ROOT).as_posix() for m in closure(module) if needs_dep(m))


def missing_deps(name: str) -> list[str]:
    stage = stages()[name]
    deps = dep_paths(stage)
    return [p for p in code_deps(stage_module(stage["cmd"])) if not covered(p, deps)]


_STAGE = re.compile(r"^  (\S[^:]*):\s*$")
_DEPS = re.compile(r"^    deps:\s*$")
_ITEM = re.compile(r"^      - (\S.*?)\s*$")


def rewrite(text: str) -> str:
    """``text`` (dvc.yaml) with each stage's project-code deps replaced by :func:`code_deps`, first in
    its ``deps:`` list, before the data deps it keeps in their order."""
    spec = stages(text)
    lines, out, i = text.split("\n"), [], 0
    current = None
    while i < len(lines):
        line = lines[i]
        if (m := _STAGE.match(line)) and m.group(1) in spec:
            current = m.group(1)
        out.append(line)
        i += 1
        if not (current and _DEPS.match(line)):
            continue
        module = stage_module(spec[current]["cmd"])
        block = []
        while i < len(lines) and (_ITEM.match(lines[i]) or lines[i].startswith("          ")):
            block.append(lines[i])
            i += 1
        if module is None:
            out.extend(block)
            continue
        kept = [b for b in block if not (_ITEM.match(b) and _ITEM.match(b).group(1).rstrip("/").split("/")[0] == PACKAGE)]
        out.extend(f"      - {path}" for path in code_deps(module))
        out.extend(kept)
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml is not current")
    parser.add_argument("--file", default=str(ROOT / "dvc.yaml"))
    args = parser.parse_args(argv)
    path = Path(args.file)
    text = path.read_text()
    new = rewrite(text)
    if new == text:
        return 0
    if args.check:
        print(f"error: {path}'s code deps differ from the stages' imports: python scripts/dvc_deps.py", file=sys.stderr)
        return 1
    path.write_text(new)
    print(f"{path}: code deps rewritten (now regenerate the studies: python -m studies.generate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
