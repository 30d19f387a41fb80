"""Reading params.yaml (or any YAML file of the project) safely: plain data only, no repeated keys, no
alias bombs, every failure one line naming the file. Validation against the schema is
:mod:`stages.params`; this module imports only PyYAML and :mod:`stages.errors`."""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from stages.errors import PipelineError

PARAMS_FILE = Path(os.environ.get("GEOMETRY_PARAMS", "params.yaml"))

MAX_YAML_BYTES = 1 << 20        # a params file is a few KB; 1 MiB is far beyond any real one
MAX_YAML_NODES = 100_000        # nodes after expanding aliases (an alias bomb expands to billions)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only: no Python objects), refusing a mapping that repeats a
    key (DVC refuses such a params.yaml; PyYAML would keep the last value silently) and a document
    that expands, through aliases, to more than :data:`MAX_YAML_NODES` nodes."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first.line + 1}; DVC refuses it too)",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root) -> None:
    """Count the nodes of ``root`` with every alias expanded (shared nodes memoised, so the count is
    cheap even for a bomb); refuse past :data:`MAX_YAML_NODES`."""
    sizes: dict[int, int] = {}

    def size(node, depth=0) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > 100:
            raise yaml.composer.ComposerError(None, None, "nesting deeper than 100 levels", node.start_mark)
        sizes[id(node)] = 1  # a recursive alias counts once (PyYAML builds it as a cycle)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v, depth + 1) for v in node.value)
        else:
            total = 1
        sizes[id(node)] = total
        if total > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"expands to more than {MAX_YAML_NODES} nodes through aliases (an alias bomb?)",
                node.start_mark)
        return total

    size(root)


def load_yaml(text: str, source: str | os.PathLike):
    """YAML text as plain data through :class:`_StrictLoader`; every failure (syntax, duplicate key,
    alias bomb, a file over :data:`MAX_YAML_BYTES`) is one :class:`PipelineError` line naming
    ``source``, the line and the column."""
    if len(text) > MAX_YAML_BYTES:
        raise PipelineError(f"corrupt YAML file: {source} ({len(text)} characters; at most {MAX_YAML_BYTES})")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise PipelineError(f"corrupt YAML file: {source} ({where}{' '.join(what.split())})") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise PipelineError(f"corrupt YAML file: {source} ({' '.join(str(exc).split())})") from None


def read_params(path: str | os.PathLike | None) -> tuple[dict, Path]:
    path = Path(path or PARAMS_FILE)
    if not path.is_file():
        raise PipelineError(f"missing params file: {path}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineError(f"corrupt params file: {path} ({' '.join(str(exc).split())})") from None
    data = load_yaml(text, path)
    if not isinstance(data, dict):
        raise PipelineError(f"params file {path} must hold a mapping")
    return data, path
