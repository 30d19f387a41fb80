import numpy as np
import pytest

from stages.errors import PipelineError
from stages.tasks import LEVELS, TASKS, build_dataset
from stages.tasks.registry import SPECIALS, undigits


def test_every_task_and_level_in_params_builds(repo_params):
    assert set(repo_params["tasks"]) == set(TASKS) and len(TASKS) == 8
    for task in TASKS:
        for level in LEVELS:
            ds = build_dataset(task, level, repo_params["tasks"][task][level], 0, 200, 50)
            assert ds.train_prompt.shape[0] > 0 and ds.test_prompt.shape[0] > 0
            assert ds.train_prompt.max() < ds.vocab_size and ds.train_answer.max() < ds.vocab_size
            assert (ds.train_prompt[:, -1] == ds.n_symbols + SPECIALS.index("=")).all()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_deterministic_and_disjoint(task, repo_params):
    knobs = repo_params["tasks"][task]["medium"]
    a = build_dataset(task, "medium", knobs, 3, 300, 100)
    b = build_dataset(task, "medium", knobs, 3, 300, 100)
    c = build_dataset(task, "medium", knobs, 4, 300, 100)
    assert np.array_equal(a.train_prompt, b.train_prompt) and np.array_equal(a.test_answer, b.test_answer)
    assert not np.array_equal(a.train_prompt, c.train_prompt)
    train = {r.tobytes() for r in a.train_prompt}
    test = {r.tobytes() for r in a.test_prompt}
    assert len(train) == len(a.train_prompt) and len(test) == len(a.test_prompt)
    assert not train & test


def test_answers_are_right():
    ds = build_dataset("add", "easy", {"digits": 3}, 0, 50, 10)
    a, b = undigits(ds.train_prompt[:, :3]), undigits(ds.train_prompt[:, 4:7])
    assert (undigits(ds.train_answer) == a + b).all()
    ds = build_dataset("mul", "easy", {"digits": 2, "digits_b": 2}, 0, 50, 10)
    assert (undigits(ds.train_answer) == undigits(ds.train_prompt[:, :2]) * undigits(ds.train_prompt[:, 3:5])).all()
    ds = build_dataset("mod", "hard", {"modulus": 97, "train_fraction": 0.5}, 0, 1, 1)
    assert len(ds.train_prompt) + len(ds.test_prompt) == 97 * 97
    assert abs(len(ds.train_prompt) - 97 * 97 / 2) < 1
    assert (ds.train_answer[:, 0] == (ds.train_prompt[:, 0] + ds.train_prompt[:, 2]) % 97).all()
    ds = build_dataset("reverse", "easy", {"length": 5}, 0, 20, 5)
    assert (ds.train_answer == ds.train_prompt[:, 4::-1]).all()
    ds = build_dataset("sort", "easy", {"length": 5}, 0, 20, 5)
    assert (ds.train_answer == np.sort(ds.train_prompt[:, :5], axis=1)).all()
    ds = build_dataset("parity", "easy", {"length": 6}, 0, 20, 5)
    assert (ds.train_answer[:, -1] == ds.train_prompt[:, :6].sum(axis=1) % 2).all()
    ds = build_dataset("compare", "easy", {"digits": 2}, 0, 200, 5)
    a, b = undigits(ds.train_prompt[:, :2]), undigits(ds.train_prompt[:, 3:5])
    gt = ds.n_symbols + SPECIALS.index(">")
    assert ((ds.train_answer[:, 0] == gt) == (a > b)).all()
    assert (undigits(ds.train_answer[:, 1:]) == np.maximum(a, b)).all()


@pytest.mark.parametrize("task,knobs,match", [
    ("nope", {}, "unknown task 'nope'"),
    ("copy", {"length": 0}, "tasks.copy.easy.length"),
    ("copy", {"length": 4, "colour": 1}, "tasks.copy.easy.colour"),
    ("mod", {"modulus": 7, "op": "pow", "train_fraction": 0.5}, "tasks.mod.easy.op"),
    ("copy", {"length": 2, "alphabet": 3}, "only 9 distinct inputs"),
])
def test_bad_knobs_name_the_key(task, knobs, match):
    with pytest.raises(PipelineError, match=match):
        build_dataset(task, "easy", knobs, 0, 20, 5)


def test_unknown_level():
    with pytest.raises(PipelineError, match="unknown level 'extreme'"):
        build_dataset("copy", "extreme", {"length": 4}, 0, 20, 5)


def negate(k):
    """The worked example of docs/extending.md: each symbol s becomes alphabet - 1 - s."""
    from stages.tasks.registry import Layout
    return Layout((k.alphabet,) * k.length, k.alphabet, lambda x: (x, k.alphabet - 1 - x))


@pytest.fixture
def negate_registered(monkeypatch):
    """A toy task registered as docs/extending.md says: one Task(...) and its generator (both undone after)."""
    from stages import params as schema
    from stages.tasks import registry
    monkeypatch.setitem(schema.TASKS, "negate", schema.Task("negate", schema.SequenceKnobs, "alphabet - 1 - s"))
    monkeypatch.setattr(registry, "negate", negate, raising=False)
    return schema


def test_a_registered_task_gets_its_schema_and_builds(negate_registered, repo_params):
    schema = negate_registered
    tasks = schema.tasks_model(schema.TASKS)
    assert "negate" in schema.train_tasks_model(schema.TASKS).model_fields
    section = {**repo_params["tasks"], "negate": {lv: {"length": 3} for lv in LEVELS}}
    section["negate"]["hard"] = {"length": 3, "alphabet": 4}
    assert tasks.model_validate(section).knobs("negate", "hard") == {"length": 3, "alphabet": 4}
    section["negate"]["hard"] = {"length": 3, "colour": 4}
    with pytest.raises(Exception) as bad:
        tasks.model_validate(section)
    line = schema._message(bad.value.errors()[0], "params.yaml")
    assert line.startswith("params.yaml: 'negate.hard.colour' is not a known key") and "\n" not in line
    ds = build_dataset("negate", "easy", {"length": 3, "alphabet": 4}, 0, 20, 10)
    assert (ds.train_answer == 3 - ds.train_prompt[:, :3]).all()
    with pytest.raises(PipelineError, match=r"^'tasks.negate.easy.length' must be a positive integer, got 0$"):
        build_dataset("negate", "easy", {"length": 0}, 0, 20, 10)


def test_every_registered_task_has_a_generator():
    from stages.tasks import registry
    for task in TASKS:
        assert callable(getattr(registry, task)), task
