"""What a checkpoint directory holds on disk, for the tests (the stages read the manifest instead)."""
import re
from pathlib import Path

_STEP_FILE = re.compile(r"step_(\d+)\.safetensors$")


def listed_steps(directory) -> list[int]:
    """Steps of the ``step_XXXXXXX.safetensors`` files in ``directory``, ascending."""
    return sorted(int(m.group(1)) for p in Path(directory).iterdir() if (m := _STEP_FILE.search(p.name)))
