"""dvc.yaml's code dependencies, derived from the imports: every stage that runs
``python -m stages.pipeline.<name>`` depends on ``data/code/<name>.json``, the md5 manifest of that
script's import closure (stages/code_manifest.py), and on no ``stages/`` file directly; the stage
``code`` depends on ``stages`` and writes one manifest per stage script.

    python scripts/dvc_deps.py            # rewrite the code deps (and the code stage's outs) in dvc.yaml
    python scripts/dvc_deps.py --check    # exit 1 if dvc.yaml is not what the stage scripts say

Only the ``- stages/...`` lines of each stage's ``deps:`` (and the ``outs:`` of ``code``) are rewritten;
data deps and everything else in dvc.yaml stay as written. tests/test_dvc_deps.py keeps dvc.yaml
current. After a rewrite, regenerate the study folders: ``python -m studies.generate``.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stages.code_manifest import MANIFESTS, PACKAGE, PIPELINE, SELF, manifest_file, stage_scripts  # noqa: E402


def stage_module(cmd: str) -> str | None:
    """The project module a stage command runs with ``python -m``, or None."""
    words = shlex.split(cmd)
    if "-m" in words and words[words.index("-m") + 1].startswith(f"{PACKAGE}."):
        return words[words.index("-m") + 1]
    return None


def stages(text: str | None = None) -> dict:
    return yaml.safe_load(text if text is not None else (ROOT / "dvc.yaml").read_text())["stages"]


def dep_paths(stage: dict) -> list[str]:
    return [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]


def script_of(name: str, stage: dict) -> str | None:
    """The stage script (``stages/pipeline/<script>.py``) stage ``name`` runs, or None for a command
    that runs no project module. A project module outside ``stages.pipeline`` has no manifest: an error."""
    module = stage_module(stage["cmd"])
    if module is None:
        return None
    package, _, script = module.rpartition(".")
    if package != PIPELINE:
        sys.exit(f"error: dvc.yaml stage '{name}' runs {module}: a stage script must be {PIPELINE}.<name>")
    return script


def manifest_dep(script: str) -> str:
    return manifest_file(script).as_posix()


_STAGE = re.compile(r"^  (\S[^:]*):\s*$")
_DEPS = re.compile(r"^    deps:\s*$")
_OUTS = re.compile(r"^    outs:\s*$")
_ITEM = re.compile(r"^      - (\S.*?)\s*$")


def _is_code(item: str) -> bool:
    """A dependency the manifest stands for: project source, or a manifest itself."""
    item = item.rstrip("/")
    return item.split("/")[0] == PACKAGE or item.startswith(f"{MANIFESTS.as_posix()}/")


def rewrite(text: str) -> str:
    """``text`` (dvc.yaml) with each stage's ``stages/...`` deps replaced by its script's manifest,
    first in its ``deps:`` list before the data deps it keeps in their order, and the ``outs:`` of the
    stage ``code`` replaced by one manifest per stage script."""
    spec = stages(text)
    lines, out, i = text.split("\n"), [], 0
    current = None
    while i < len(lines):
        line = lines[i]
        if (m := _STAGE.match(line)) and m.group(1) in spec:
            current = m.group(1)
        out.append(line)
        i += 1
        if not current or not (_DEPS.match(line) or _OUTS.match(line)):
            continue
        script = script_of(current, spec[current])
        block = []
        while i < len(lines) and (_ITEM.match(lines[i]) or lines[i].startswith("          ")):
            block.append(lines[i])
            i += 1
        deps = bool(_DEPS.match(line))
        if script == SELF and not deps:  # the code stage writes every manifest
            out.extend(f"      - {manifest_dep(s)}" for s in stage_scripts())
        elif script not in (None, SELF) and deps:  # another stage reads its own
            out.append(f"      - {manifest_dep(script)}")
            out.extend(b for b in block if not (_ITEM.match(b) and _is_code(_ITEM.match(b).group(1))))
        else:
            out.extend(block)
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
        print(f"error: {path}'s code deps differ from the stage scripts: python scripts/dvc_deps.py", file=sys.stderr)
        return 1
    path.write_text(new)
    print(f"{path}: code deps rewritten (now regenerate the studies: python -m studies.generate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
