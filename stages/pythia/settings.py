"""The ``pythia`` section of params.yaml, typed: run ids, the section itself, where a model comes from.

The schema (:class:`stages.params.Pythia`) checks every key; what is left here needs more than one
key and the command line (``--model`` against ``pythia.models``) or the environment (``offline: auto``).
"""
from __future__ import annotations

from dataclasses import dataclass

from stages.config import name_argument, run_id
from stages.errors import PipelineError
from stages.params import Params, Pythia
from stages.pythia.hub import offline_mode

TASK, LEVEL = "pythia", "lm"  # Pythia runs join the grid as task "pythia", level "lm", model = size


def pythia_run_id(model: str) -> str:
    """``pythia-lm-<model>``; a bad model name is rejected (naming ``--model``) before any path is built."""
    return run_id(TASK, LEVEL, model)


def section(params: Params, key: str = "pythia") -> Pythia:
    """``params.pythia``; a params.yaml without it is a one-line error naming ``key`` (the first key the
    stage needs from it)."""
    if params.pythia is None:
        raise PipelineError(f"missing key '{key}' (no 'pythia' under 'params')")
    return params.pythia


@dataclass(frozen=True)
class Source:
    """Where one model comes from under the active profile."""

    profile: str
    model: str
    repo_id: str
    cache_dir: str | None
    offline: bool
    revisions: list[str]


def source(cfg: Pythia, model: str) -> Source:
    """Where ``model`` comes from under the active profile: repo id, cache dir, offline flag, revisions."""
    name_argument(model, "--model")
    if model not in cfg.models:
        raise PipelineError(f"model '{model}' is not in 'pythia.models' ({', '.join(cfg.models)})")
    prof = cfg.active()  # the schema checked: the profile exists, and a local suite trains every model
    return Source(profile=cfg.profile, model=model, repo_id=prof.repo_id(model), cache_dir=prof.cache_dir,
                  offline=offline_mode(prof.offline), revisions=list(prof.revisions))
