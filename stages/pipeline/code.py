"""Stage ``code``: the source files each stage script runs, with their md5 -> ``data/code/<stage>.json``.

Every other stage depends on its script's manifest instead of on its source files one by one
(stages/code_manifest.py): an edit under ``stages/`` reruns this stage, then the stages whose
manifest it changed. Reads source only (no torch), so it takes about a second.
"""
from __future__ import annotations

import argparse

from stages.code_manifest import manifest_file, manifest_text, stage_scripts
from stages.errors import main_guard
from stages.io.atomic import write_text


@main_guard
def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    names = stage_scripts()
    for name in names:
        write_text(manifest_file(name), manifest_text(name))
    print(f"{manifest_file(names[0]).parent}: {len(names)} manifests ({', '.join(names)})")


if __name__ == "__main__":
    main()
