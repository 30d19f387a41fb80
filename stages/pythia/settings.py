"""The ``pythia`` section of params.yaml: the active profile, its models and revisions, run ids."""
from __future__ import annotations

from stages.config import choose, fraction, get, name_argument, positive_float, positive_int, run_id
from stages.errors import PipelineError
from stages.pythia.hub import offline_mode, revision_step

TASK, LEVEL = "pythia", "lm"  # Pythia runs join the grid as task "pythia", level "lm", model = size


def pythia_run_id(model: str) -> str:
    """``pythia-lm-<model>``; a bad model name is rejected (naming ``--model``) before any path is built."""
    return run_id(TASK, LEVEL, model)


def models(params: dict) -> list[str]:
    names = get(params, "pythia.models")
    if not isinstance(names, list) or not names:
        raise PipelineError("'pythia.models' must be a non-empty list")
    for name in names:
        name_argument(name, "pythia.models")
    return names


def grid_runs(params: dict) -> list[tuple[str, str, str]]:
    """The Pythia runs for the events stage; none when params.yaml has no ``pythia`` section."""
    if "pythia" not in params:
        return []
    return [(TASK, LEVEL, m) for m in models(params)]


def profile(params: dict) -> tuple[str, dict]:
    profiles = get(params, "pythia.profiles")
    if not isinstance(profiles, dict) or not profiles:
        raise PipelineError("'pythia.profiles' must be a mapping of profile names to settings")
    name = choose(get(params, "pythia.profile"), profiles, "pythia.profile")
    return name, profiles[name]


def source(params: dict, model: str) -> dict:
    """Where ``model`` comes from under the active profile: repo id, cache dir, offline flag, revisions."""
    name_argument(model, "--model")
    name, prof = profile(params)
    key = f"pythia.profiles.{name}"
    if model not in models(params):
        raise PipelineError(f"model '{model}' is not in 'pythia.models' ({', '.join(models(params))})")
    if "train" in prof and model not in prof["train"]:
        raise PipelineError(f"model '{model}' has no training settings under '{key}.train' "
                            f"(the local suite trains: {', '.join(prof['train'])})")
    repo = get(params, f"{key}.repo")
    if not isinstance(repo, str) or "{model}" not in repo:
        raise PipelineError(f"'{key}.repo' must be a string containing {{model}}, got {repo!r}")
    revisions = revisions_of(get(params, f"{key}.revisions"), f"{key}.revisions")
    cache_dir = get(params, f"{key}.cache_dir", None)
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise PipelineError(f"'{key}.cache_dir' must be a path or null, got {cache_dir!r}")
    return {"profile": name, "model": model, "repo_id": repo.format(model=model), "cache_dir": cache_dir,
            "offline": offline_mode(get(params, f"{key}.offline", "auto")), "revisions": revisions}


def revisions_of(values, key: str) -> list[str]:
    if not isinstance(values, list) or not values:
        raise PipelineError(f"'{key}' must be a non-empty list of stepN revisions")
    steps = [revision_step(v) for v in values]
    if sorted(set(steps)) != steps:
        raise PipelineError(f"'{key}' must list distinct revisions in increasing step order")
    return list(values)


def train_settings(params: dict, model: str) -> dict:
    name_argument(model, "pythia.profiles.local.train")  # a model name becomes a repo and cache path
    key = f"pythia.profiles.local.train.{model}"
    cfg = get(params, key)
    for k in ("hidden_size", "layers", "heads", "seq_len", "steps", "batch_size", "warmup", "seed"):
        positive_int(get(params, f"{key}.{k}"), f"{key}.{k}", allow_zero=k in ("warmup", "seed"))
    positive_float(get(params, f"{key}.lr"), f"{key}.lr")
    positive_float(get(params, f"{key}.weight_decay"), f"{key}.weight_decay", allow_zero=True)
    positive_float(get(params, f"{key}.grad_clip"), f"{key}.grad_clip", allow_zero=True)
    fraction(get(params, f"{key}.min_lr_ratio"), f"{key}.min_lr_ratio")
    betas = get(params, f"{key}.betas")
    if (not isinstance(betas, list) or len(betas) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
        raise PipelineError(f"'{key}.betas' must be a list of two numbers in [0, 1), got {betas!r}")
    if cfg["hidden_size"] % cfg["heads"]:
        raise PipelineError(f"'{key}.hidden_size' must be divisible by '{key}.heads'")
    return cfg
