"""Prototype of the code-manifest layout (docs/performance.md, "The per-stage lever"), for measuring it.

    python benchmarks/dvc_code_manifests.py CLONE        # rewrite a throwaway clone of this repository
    cd CLONE && rm -rf data && python benchmarks/dvc_overhead.py -- dvc repro

Rewrites CLONE's dvc.yaml so that every stage depends on one manifest, ``data/code/<stage>.json``,
instead of the files of its import closure. It adds a ``code`` stage that depends on the directory
``stages/`` and writes the manifests: each one maps every file of that stage's closure to its md5
(scripts/dvc_deps.py's closure). An edit reruns ``code``, which rewrites only the manifests whose
closure the edit touches, so the same stages rerun as with per-file deps. CLONE's dvc.lock is
rewritten the same way (the code entries become the manifest's entry), and ``__pycache__`` goes into
its .dvcignore. It never touches this repository: CLONE must be another checkout.
Compare DVC's time per stage with the same command in an unchanged clone.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The code stage's command, written into CLONE/scripts/code_manifests.py.
WRITER = '''"""The code stage of the code-manifest prototype (benchmarks/dvc_code_manifests.py)."""
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
import dvc_deps as d
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, stage in d.stages().items():
    module = d.stage_module(stage["cmd"])
    if module is None:
        continue
    files = d.code_deps(module)
    text = json.dumps({f: hashlib.md5((d.ROOT / f).read_bytes()).hexdigest() for f in files}, indent=1, sort_keys=True)
    (out / f"{name}.json").write_text(text + "\\n")
'''


def rewrite_dvc_yaml(text: str, kinds: list[str]) -> str:
    out, current, replaced = [], None, False
    for line in text.split("\n"):
        if m := re.match(r"^  (\S[^:]*):\s*$", line):
            current = m.group(1)
        if re.match(r"^      - stages/", line):
            if not replaced:
                out.append(f"      - data/code/{current}.json")
                replaced = True
            continue
        if not re.match(r"^      - ", line):
            replaced = False
        out.append(line)
    code = ("  code:\n    cmd: python scripts/code_manifests.py data/code\n    deps:\n      - stages\n"
            "      - scripts/code_manifests.py\n      - scripts/dvc_deps.py\n    outs:\n"
            + "".join(f"      - data/code/{k}.json\n" for k in kinds) + "\n")
    return "\n".join(out).replace("stages:\n", "stages:\n" + code, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path, help="a throwaway checkout of this repository")
    clone = parser.parse_args().clone.resolve()
    if clone == ROOT or not (clone / "dvc.yaml").is_file():
        sys.exit(f"error: {clone}: expected another checkout of this repository (with dvc.yaml), not this one")
    from ruamel.yaml import YAML

    sys.path.insert(0, str(clone / "scripts"))
    import dvc_deps

    kinds = [name for name, stage in dvc_deps.stages().items() if dvc_deps.stage_module(stage["cmd"])]
    (clone / "scripts" / "code_manifests.py").write_text(WRITER)
    (clone / "dvc.yaml").write_text(rewrite_dvc_yaml((clone / "dvc.yaml").read_text(), kinds))
    subprocess.run([sys.executable, "scripts/code_manifests.py", "data/code"], cwd=clone, check=True)
    yaml = YAML()
    lock = yaml.load(clone / "dvc.lock")
    before = len((clone / "dvc.lock").read_text().splitlines())
    for name, stage in lock["stages"].items():
        manifest = clone / "data" / "code" / f"{name.split('@')[0]}.json"
        deps, done = [], False
        for dep in stage.get("deps", []):
            if not dep["path"].startswith("stages/"):
                deps.append(dep)
            elif not done:
                data = manifest.read_bytes()
                deps.append({"path": manifest.relative_to(clone).as_posix(), "hash": "md5",
                             "md5": hashlib.md5(data).hexdigest(), "size": len(data)})
                done = True
        stage["deps"] = deps
    yaml.dump(lock, clone / "dvc.lock")
    with open(clone / ".dvcignore", "a") as f:
        f.write("__pycache__\n")
    after = len((clone / "dvc.lock").read_text().splitlines())
    print(f"{clone}: {len(kinds)} manifests in data/code; dvc.lock {before} -> {after} lines")


if __name__ == "__main__":
    main()
