"""The typed schema of params.yaml (stages/params.py): the repository's file and the tests' shrunk copies
validate; an unknown key, a wrong type or a bad range anywhere is one PipelineError line naming its full
YAML path; every stage checks the whole file when it loads it (stages.config.load_params)."""
import copy

import pytest
import yaml

from stages.config import load_params, load_typed_params
from stages.errors import PipelineError
from stages.params import Params, validate_params
from tests.conftest import ROOT, tiny_params
from tests.pythia_helpers import pythia_params


def error_of(params: dict) -> str:
    with pytest.raises(PipelineError) as exc:
        validate_params(params)
    message = str(exc.value)
    assert "\n" not in message, message
    return message


def edited(repo_params, path: str, value=None, delete=False) -> dict:
    """A deep copy of ``repo_params`` with the dotted ``path`` set to ``value`` (or deleted)."""
    params = copy.deepcopy(repo_params)
    *parents, leaf = path.split(".")
    node = params
    for part in parents:
        node = node[part]
    if delete:
        del node[leaf]
    else:
        node[leaf] = value
    return params


def test_repository_params_validate(repo_params):
    params = validate_params(repo_params)
    assert isinstance(params, Params)
    assert params.grid.seeds == repo_params["grid"]["seeds"]
    assert params.train.defaults.steps == repo_params["train"]["defaults"]["steps"]
    assert params.pythia is not None and params.pythia.active() is params.pythia.profiles[params.pythia.profile]


def test_tests_shrunk_params_validate(repo_params):
    validate_params(tiny_params(repo_params))  # no pythia section at all
    validate_params(pythia_params(repo_params))
    validate_params(pythia_params({**tiny_params(repo_params), "pythia": repo_params["pythia"]}))


def test_load_params_validates_and_load_typed_params_types(tmp_path, repo_params):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(repo_params))
    assert load_params(path) == repo_params  # still the plain mapping the stages read
    typed = load_typed_params(path)
    assert isinstance(typed, Params) and typed.extract.probe_size == repo_params["extract"]["probe_size"]
    path.write_text(yaml.safe_dump(edited(repo_params, "extract.devise", "cpu")))
    for load in (load_params, load_typed_params):
        with pytest.raises(PipelineError) as exc:
            load(path)
        assert str(exc.value).startswith(f"{path}: 'extract.devise' is not a known key (did you mean 'device'?")


def test_a_stage_stops_on_an_unknown_key_before_any_work(workdir, capsys):
    from stages import paths
    from stages.pipeline import generate

    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["extract"]["devise"] = "cpu"  # a key generate never reads: the whole file is checked
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(SystemExit) as exc:
        generate.main(["--task", "copy", "--level", "easy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: params.yaml: 'extract.devise' is not a known key") and err.count("\n") == 1
    assert not paths.dataset_dir("copy", "easy").exists()


def test_unknown_key_names_its_path(repo_params):
    message = error_of(edited(repo_params, "extract.devise", "cpu"))
    assert message.startswith("params.yaml: 'extract.devise' is not a known key (did you mean 'device'? known: ")
    assert "probe_size" in message
    assert error_of({**repo_params, "extras": 1}).startswith("params.yaml: 'extras' is not a known key")


@pytest.mark.parametrize("path", [
    "train.tasks.mod.hard.stepz",
    "train.tasks.mod.all.stepz",
    "train.defaults.stepz",
    "pythia.profiles.local.train.tiny.layerz",
    "pythia.profiles.pythia.revisionz",
    "pythia.evals.seedz",
    "tasks.copy.easy.lenght",
    "events.bootstrap.resamplez",
    "events.sensitivity.min_leads",
    "measures.probe.c",
    "landscape.llc.drawz",
    "landscape.grad.samplez",
    "landscape_events.rise_fractions",
])
def test_unknown_key_nested_deep_names_the_full_path(repo_params, path):
    params = copy.deepcopy(repo_params)
    params["train"]["tasks"]["mod"]["hard"] = params["train"]["tasks"]["mod"].get("hard") or {}
    params["train"]["tasks"]["mod"]["all"] = params["train"]["tasks"]["mod"].get("all") or {}
    assert error_of(edited(params, path, 3)).startswith(f"params.yaml: '{path}' is not a known key")


def test_task_wide_train_settings_go_under_all(repo_params):
    message = error_of(edited(repo_params, "train.tasks.mod.steps", 10))
    assert message.startswith("params.yaml: 'train.tasks.mod.steps' is not a known key (task-wide settings go "
                              "under 'all'")
    assert error_of(edited(repo_params, "train.tasks.copi", {})).startswith(
        "params.yaml: 'train.tasks.copi' is not a known key (did you mean 'copy'?")


@pytest.mark.parametrize("path,value,needle", [
    ("train.defaults.steps", "ten", "'train.defaults.steps' must be a positive integer, got 'ten'"),
    ("train.defaults.steps", 0, "'train.defaults.steps' must be a positive integer, got 0"),
    ("train.defaults.steps", 10.0, "'train.defaults.steps' must be a positive integer, got 10.0"),
    ("train.defaults.steps", True, "'train.defaults.steps' must be a positive integer, got True"),
    ("train.defaults.warmup", -1, "'train.defaults.warmup' must be a non-negative integer, got -1"),
    ("train.defaults.lr", "fast", "'train.defaults.lr' must be a number, got 'fast'"),
    ("train.defaults.lr", 0, "'train.defaults.lr' must be positive, got 0"),
    ("train.defaults.dropout", 1.5, "'train.defaults.dropout' must lie in [0, 1], got 1.5"),
    ("train.defaults.betas", [0.9], "'train.defaults.betas' must be a list of two numbers in [0, 1), got [0.9]"),
    ("train.defaults.betas", [0.9, 1.0], "'train.defaults.betas' must be a list of two numbers in [0, 1)"),
    ("train.defaults.betas", ["0.9", 0.98], "'train.defaults.betas' must be a list of two numbers in [0, 1)"),
    ("train.defaults.n_checkpoints", 257, "'train.defaults.n_checkpoints' must be at most 256, got 257"),
    ("train.defaults.schedule", "zigzag",
     "unknown train.defaults.schedule 'zigzag' (choose from: constant, cosine, linear)"),
    ("train.defaults.precision", "fp16", "unknown train.defaults.precision 'fp16' (choose from: auto, fp32, bf16)"),
    ("train.defaults.device", "tpu", "unknown train.defaults.device 'tpu' (choose from: auto, cpu, cuda, cuda:N)"),
    ("train.tasks.mod.hard", {"lr": -1}, "'train.tasks.mod.hard.lr' must be positive, got -1"),
    ("train.tasks.mod", [150], "'train.tasks.mod' must be a mapping, got [150]"),
    ("extract.positions", "last", "unknown extract.positions 'last' (choose from: first, all)"),
    ("extract.device", "cuda:x", "unknown extract.device 'cuda:x'"),
    ("measures.probe.train_fraction", 2, "'measures.probe.train_fraction' must lie in [0, 1], got 2"),
    ("datasets.seed", -1, "'datasets.seed' must be a non-negative integer, got -1"),
    ("runtime.threads", 0, "'runtime.threads' must be a positive integer, got 0"),
    ("tasks.copy.easy.length", "four", "'tasks.copy.easy.length' must be a positive integer, got 'four'"),
    ("tasks.mod.easy.modulus", 1, "'tasks.mod.easy.modulus' must be an integer of at least 2, got 1"),
    ("tasks.mod.easy.op", "div", "unknown tasks.mod.easy.op 'div' (choose from: add, sub, mul)"),
    ("tasks.add.hard.digits", 10, "'tasks.add.hard' digit counts must add up to at most 18, got 10 + 10"),
    ("tasks.parity.easy.train_fraction", 1.5, "'tasks.parity.easy.train_fraction' must lie in [0, 1], got 1.5"),
    ("tasks.copy", 5, "'tasks.copy' must be a mapping, got 5"),
    ("events.measure", "rank", "unknown events.measure 'rank' (choose from: rankme, rankme_centred)"),
    ("events.precursor_min_lead", 1.0, "'events.precursor_min_lead' must lie in [0, 1), got 1.0"),
    ("events.sensitivity.n_checkpoints", [8, 1],
     "'events.sensitivity.n_checkpoints[1]' must be 0 (as trained) or at least 2, got 1"),
    ("events.sensitivity.min_lead", [], "'events.sensitivity.min_lead' must be a non-empty list"),
    ("pythia.profile", "nope", "unknown pythia.profile 'nope' (choose from: local, pythia)"),
    ("pythia.test_acc", "chess", "unknown pythia.test_acc 'chess' (choose from: mean, "),
    ("pythia.acquisition", 1.5, "'pythia.acquisition' must be 'halfway' or a number in (0, 1), got 1.5"),
    ("pythia.verify", "md5", "unknown pythia.verify 'md5' (choose from: sha256, size)"),
    ("pythia.models", ["../x"], "'pythia.models[0]' must be a non-empty name"),
    ("pythia.profiles.local.repo", "local/pythia", "'pythia.profiles.local.repo' must be a string containing {model}"),
    ("pythia.profiles.local.offline", "yes", "'pythia.profiles.local.offline' must be auto, true or false"),
    ("pythia.profiles.local.revisions", ["step4", "step2"],
     "'pythia.profiles.local.revisions' must list distinct revisions in increasing step order"),
    ("pythia.profiles.local.revisions", ["step0", "main"],
     "'pythia.profiles.local.revisions[1]' must be a revision of the form stepN, got 'main'"),
    ("pythia.profiles.local.train.tiny.heads", 3,
     "'pythia.profiles.local.train.tiny.hidden_size' must be divisible by heads (3)"),
    ("pythia", None, "'pythia' must not be null"),
    ("landscape.measures", ["llc", "curvature"], "unknown entry 'curvature' in 'landscape.measures'"),
    ("landscape.llc.nbeta", "big", "'landscape.llc.nbeta' must be auto or a positive number, got 'big'"),
    ("landscape.hessian.k", "two", "'landscape.hessian.k' must be a positive integer, got 'two'"),
    ("landscape_events.directions.llc", "up", "unknown landscape_events.directions.llc 'up' (choose from: dip, rise)"),
])
def test_wrong_type_or_range_names_the_path(repo_params, path, value, needle):
    assert error_of(edited(repo_params, path, value)).startswith(f"params.yaml: {needle}")


@pytest.mark.parametrize("seeds,needle", [
    ([], "'grid.seeds' must be a non-empty list of integers, got []"),
    ([0, 0], "'grid.seeds' repeats an entry: [0, 0]"),
    ("0", "'grid.seeds' must be a non-empty list of integers, got '0'"),
    ([0, -1], "'grid.seeds[1]' must be a non-negative integer, got -1"),
])
def test_bad_seeds(repo_params, seeds, needle):
    assert error_of(edited(repo_params, "grid.seeds", seeds)) == f"params.yaml: {needle}"


@pytest.mark.parametrize("key,value,needle", [
    ("tasks", ["copy", "copi"], "unknown entry 'copi' in 'grid.tasks' (choose from: copy, reverse"),
    ("levels", ["easy", "insane"], "unknown entry 'insane' in 'grid.levels' (choose from: easy, medium, hard)"),
    ("models", ["gpt5"], "unknown entry 'gpt5' in 'grid.models' (choose from: p100k, p405k"),
    ("tasks", ["copy", "copy"], "'grid.tasks' repeats an entry"),
])
def test_bad_grid_entries(repo_params, key, value, needle):
    assert error_of(edited(repo_params, f"grid.{key}", value)).startswith(f"params.yaml: {needle}")


@pytest.mark.parametrize("layer", ["last", "mean", 2, 0])
def test_events_layer_accepts(repo_params, layer):
    assert validate_params(edited(repo_params, "events.layer", layer)).events.layer == layer


@pytest.mark.parametrize("layer", ["first", -1, 1.5, True, None])
def test_events_layer_rejects(repo_params, layer):
    assert error_of(edited(repo_params, "events.layer", layer)) == (
        f"params.yaml: 'events.layer' must be 'last', 'mean' or a layer number, got {layer!r}")


@pytest.mark.parametrize("value", ["halfway", 0.5, 0.75])
def test_pythia_acquisition_accepts(repo_params, value):
    assert validate_params(edited(repo_params, "pythia.acquisition", value)).pythia.acquisition == value


@pytest.mark.parametrize("bad", ["half", "0.5", 0, 1, -0.2, True, None, float("nan"), [0.5]])
def test_pythia_acquisition_rejects(repo_params, bad):
    """The schema is the one check (stages/analysis/pythia_events.py takes the value as given)."""
    message = error_of(edited(repo_params, "pythia.acquisition", bad))
    assert message.startswith("params.yaml: 'pythia.acquisition' must be 'halfway' or a number in (0, 1), got"), message


def test_suite_mixture_names_known_sets(repo_params):
    path = "pythia.profiles.local.train.tiny.mixture"
    mixture = validate_params(edited(repo_params, path, {"negation": 1, "syllogism": 0.5})).pythia.active().train
    assert mixture["tiny"].mixture == {"negation": 1.0, "syllogism": 0.5}
    assert error_of(edited(repo_params, path, {"chess": 1})).startswith(f"params.yaml: '{path}.chess' is not a known key (known: subject_verb")
    assert error_of(edited(repo_params, path, {"negation": -1})) == (
        f"params.yaml: '{path}.negation' must be non-negative, got -1")
    assert "needs a positive weight" in error_of(edited(repo_params, path, {"negation": 0}))


def test_missing_keys_are_named(repo_params):
    assert error_of(edited(repo_params, "tasks.copy.easy", delete=True)) == "params.yaml: missing key 'tasks.copy.easy'"
    assert error_of(edited(repo_params, "train.defaults.lr", delete=True)) == (
        "params.yaml: missing key 'train.defaults.lr'")
    assert error_of(edited(repo_params, "landscape", delete=True)) == "params.yaml: missing key 'landscape'"


def test_optional_keys_default_as_the_stages_do(repo_params):
    params = copy.deepcopy(repo_params)
    for key in ("device", "precision"):
        params["extract"].pop(key, None)
    for key in ("acquisition", "verify", "device"):
        params["pythia"].pop(key, None)
    params["train"]["tasks"] = {"copy": None}
    typed = validate_params(params)
    assert (typed.extract.device, typed.extract.precision) == ("auto", "auto")
    assert (typed.pythia.acquisition, typed.pythia.verify, typed.pythia.device) == ("halfway", "sha256", "auto")
    assert typed.measures.rankme_chunk is None
    assert typed.train.resolve("copy", "easy") == typed.train.defaults
    assert error_of(edited(repo_params, "extract.device", None)).startswith(
        "params.yaml: unknown extract.device None")


def test_train_resolve_overlays_all_then_the_level(repo_params):
    params = copy.deepcopy(repo_params)
    params["train"]["tasks"]["mod"] = {"all": {"steps": 20, "lr": 0.01}, "hard": {"steps": 30}}
    train = validate_params(params).train
    assert (train.resolve("mod", "hard").steps, train.resolve("mod", "hard").lr) == (30, 0.01)
    assert train.resolve("mod", "easy").steps == 20
    assert train.resolve("mod", "easy").batch_size == repo_params["train"]["defaults"]["batch_size"]


def test_tasks_knobs_are_what_params_yaml_says(repo_params):
    tasks = validate_params(repo_params).tasks
    for task, levels in repo_params["tasks"].items():
        for level, knobs in levels.items():
            assert tasks.knobs(task, level) == knobs


def test_schema_names_match_the_stages():
    """Names declared once in the schema are the stages' (imported, not copied); what the stages must
    still define next to their code (task knobs, modular ops, evaluation sets) agrees with the schema."""
    from stages import params as schema
    from stages.pipeline import landscape
    from stages.analysis import landscape_events, pythia_events, runs
    from stages.pythia.grammar import GENERATORS
    from stages.tasks.registry import MOD_OPS, TASKS
    from stages.training import precision, schedule

    assert schedule.LR_SCHEDULES is schema.LR_SCHEDULES and schedule.MAX_CHECKPOINTS is schema.MAX_CHECKPOINTS
    assert precision.PRECISIONS is schema.PRECISIONS and runs.GEOMETRY is schema.GEOMETRY
    assert pythia_events.HALFWAY is schema.HALFWAY and landscape.MEASURES is schema.LANDSCAPE_MEASURES
    assert landscape_events.DIRECTIONS is schema.DIRECTIONS
    assert schema.MOD_OPS == tuple(MOD_OPS)
    assert schema.EVAL_SETS == tuple(GENERATORS)
    assert list(schema.Overrides.model_fields) == list(schema.TrainSettings.model_fields)  # generated from it
    assert TASKS is schema.TASKS and schema.TASK_NAMES == tuple(TASKS)


def test_params_yaml_on_disk_validates():
    validate_params(yaml.safe_load((ROOT / "params.yaml").read_text()))
