"""Which project source files each stage script runs, as md5 manifests (stage ``code``).

Every stage of dvc.yaml that runs ``python -m stages.pipeline.<name>`` depends on
``data/code/<name>.json``: for each source file of that script's import closure, the md5 of its code
(:func:`code_text`: the file without comments, docstrings and blank lines, so editing those reruns no
stage). The stage ``code`` depends on the directory ``stages/`` and rewrites the manifests, so an edit
under ``stages/`` reruns ``code`` (about a second) and then exactly the stages whose closure holds code
the edit changed, as listing the files one by one would. One dependency per stage instead of about 30 keeps
dvc.lock short, and rewriting dvc.lock after every stage is DVC's main per-stage cost
(docs/performance.md).

The closure is read with ``ast``: every ``import`` / ``from ... import`` anywhere in a module,
including inside functions. A package's ``__init__.py`` counts only when it does more than hold a
docstring. Reading source only, this imports nothing it lists (no torch): the stage takes a second.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import tokenize
from pathlib import Path

from stages.paths import DATA

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "stages"
PIPELINE = f"{PACKAGE}.pipeline"
SELF = "code"  # this stage's own module; it depends on the whole directory, not on a manifest
MANIFESTS = DATA / "code"  # relative to the pipeline's folder


def manifest_file(script: str) -> Path:
    """Where the manifest of stage script ``script`` goes."""
    return MANIFESTS / f"{script}.json"


@functools.lru_cache(maxsize=None)
def _parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """Parsed once per text: one manifest run walks the same modules for every stage script."""
    return ast.parse(source, filename=filename)


def _tree(path: Path) -> ast.Module:
    return _parse(path.read_text(), str(path))


def module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (``a.b`` -> a/b.py or a/b/__init__.py), or None."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


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

    for node in ast.walk(_tree(path)):
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
    body = _tree(path).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def code_deps(module: str) -> list[str]:
    """The source files (paths from the project root) of ``module``'s import closure, sorted."""
    return sorted(module_file(m).relative_to(ROOT).as_posix() for m in closure(module) if needs_dep(m))


def stage_scripts() -> list[str]:
    """The names of the stage scripts that get a manifest: ``stages/pipeline/<name>.py``, sorted,
    without ``code`` itself."""
    folder = ROOT.joinpath(*PIPELINE.split("."))
    return sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", SELF))


def _docstring_lines(tree: ast.Module, lines: list[str]) -> set[int]:
    """1-based numbers of the lines that hold nothing but a docstring (of the module, a class or a
    function). A docstring sharing a line with code (``def f(): "doc"``) is left in."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            continue
        first, last = lines[doc.lineno - 1], lines[doc.end_lineno - 1]
        before = first.encode()[:doc.col_offset].decode()  # AST columns count UTF-8 bytes
        after = last.encode()[doc.end_col_offset:].decode()
        if not before.strip() and not after.strip():
            found.update(range(doc.lineno, doc.end_lineno + 1))
    return found


def code_text(source: str) -> str:
    """``source`` without its comments, its docstrings and its blank lines: the lines the interpreter
    runs, in the file's own characters (so the same on every Python version). Blank lines and spaces
    inside a string literal are kept: they can reach an output."""
    lines = source.splitlines()
    drop = _docstring_lines(_parse(source), lines)
    comments, in_string = {}, set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
        elif tok.start[0] < tok.end[0]:  # a token over several lines: a string (or f-string part)
            in_string.update(range(tok.start[0] + 1, tok.end[0] + 1))
    kept = []
    for number, line in enumerate(lines, start=1):
        if number in drop:
            continue
        if number in comments:
            line = line[:comments[number]].rstrip()
        if line.strip() or number in in_string:
            kept.append(line)
    return "\n".join(kept) + "\n"


@functools.lru_cache(maxsize=None)
def _code_md5(source: str) -> str:
    return hashlib.md5(code_text(source).encode()).hexdigest()


def code_digest(path: Path) -> str:
    """The md5 of :func:`code_text` of the file at ``path``."""
    return _code_md5(path.read_text())


def manifest(name: str) -> dict[str, str]:
    """``{source file: md5 of its code_text}`` over the closure of ``stages.pipeline.<name>``: an edit
    of a comment or a docstring changes no manifest, so it reruns no stage."""
    return {f: code_digest(ROOT / f) for f in code_deps(f"{PIPELINE}.{name}")}


def manifest_text(name: str) -> str:
    """The manifest as the stage writes it: sorted JSON, one file per line."""
    return json.dumps(manifest(name), indent=1, sort_keys=True) + "\n"
