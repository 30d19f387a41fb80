"""The layout shows the architecture (issue 22): stage scripts in ``stages/pipeline/`` over a library
that never imports them; the monitor and the cluster runner beside the pipeline, importing only the
library; no import cycles between modules; and importing the library changes nothing in the process.
"""
import ast
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGE = "stages"
PIPELINE = "stages.pipeline"
BESIDE = ("stages.monitor", "stages.cluster")  # beside the pipeline: library users, not library


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def imports(name: str, top_level_only: bool = False) -> set[str]:
    """Project modules ``name`` names in its imports (``from a import b``: ``a.b`` when that is a module)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # ``from a import b``: the submodule a.b when b is one (a is only its package), else a itself
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        elif top_level_only and isinstance(node, (ast.If, ast.Try)):  # guarded top-level imports count too
            targets = [t for sub in ast.walk(node) if isinstance(sub, ast.ImportFrom) for t in [sub.module or ""]]
        else:
            continue
        found |= {t for t in targets if t in MODULES}
    found.discard(name)
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_stage_scripts_are_in_one_place_and_nothing_imports_them():
    stages = {m for m in MODULES if within(m, PIPELINE) and m != PIPELINE}
    assert {"stages.pipeline.train", "stages.pipeline.events"} <= stages
    for module in MODULES:
        if not within(module, PIPELINE):
            assert not imports(module) & (stages | {PIPELINE}), f"{module} imports a stage script"
    for stage in stages:  # and no stage imports another
        assert not imports(stage) & stages, f"{stage} imports another stage"


@pytest.mark.parametrize("beside", BESIDE)
def test_monitor_and_cluster_import_only_the_library(beside):
    for module in MODULES:
        if within(module, beside):
            wrong = {m for m in imports(module) if within(m, PIPELINE) or any(within(m, b) for b in BESIDE if b != beside)}
            assert not wrong, f"{module} imports {sorted(wrong)}"


def test_the_library_imports_neither_the_pipeline_nor_what_sits_beside_it():
    for module in MODULES:
        if within(module, PIPELINE) or any(within(module, b) for b in BESIDE):
            continue
        wrong = {m for m in imports(module) if within(m, PIPELINE) or any(within(m, b) for b in BESIDE)}
        assert not wrong, f"library module {module} imports {sorted(wrong)}"


def cycles(graph: dict) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_at_module_level():
    graph = {m: imports(m, top_level_only=True) for m in MODULES}
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail


def test_no_import_cycles_inside_functions_either():
    """Function-level imports may not close a cycle either (``python -m stages.params`` reads the file
    through stages.params_file, below both stages.params and stages.config)."""
    graph = {m: imports(m) for m in MODULES}
    assert cycles(graph) == []


def test_importing_the_library_changes_nothing_in_the_process():
    # third-party libraries set variables of their own when they load (transformers: TORCHINDUCTOR_CACHE_DIR):
    # they load first, then the project's modules must add nothing
    code = ("import os, sys, torch, transformers; from transformers import GPTNeoXForCausalLM; "
            "before = dict(os.environ); "
            "import stages.params, stages.config, stages.tasks, stages.models, stages.training.loop, "
            "stages.measures.rankme, stages.analysis.event_rules, stages.io.checkpoints, stages.pythia.suite, "
            "stages.monitor, stages.pipeline, stages.pipeline.train; "
            "import torch; assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items()); "
            "print(torch.get_num_threads())")
    plain = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True).stdout
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain
