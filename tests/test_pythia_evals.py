import random
import re

import pytest

from stages.errors import PipelineError
from stages.pythia import evalsets, grammar


def test_eight_sets_deterministic_and_seeded():
    a, b = evalsets.generate(20, seed=3), evalsets.generate(20, seed=3)
    assert a.equals(b)
    assert sorted(a["eval_set"].unique()) == sorted(grammar.GENERATORS) and len(grammar.DIAGNOSTIC) == 7
    assert a.groupby("eval_set").size().eq(20).all()
    assert not a.equals(evalsets.generate(20, seed=4))


def test_items_well_formed_and_in_vocabulary():
    frame = evalsets.generate(40, seed=0)
    vocab = set(grammar.vocabulary())
    for context, choices, answer in zip(frame["context"], frame["choices"], frame["answer"]):
        assert 2 <= len(choices) <= 5 and 0 <= answer < len(choices)
        assert len(set(choices)) == len(choices)
        assert set(context.split()) <= vocab and all(set(c.split()) <= vocab for c in choices)
    assert not frame[["eval_set", "context"]].assign(c=frame["choices"].map(tuple)).duplicated().any()
    # minimal pairs: both sides differ from each other and answers are balanced between positions
    pairs = frame[frame["choices"].map(len) == 2]
    assert 0.3 < pairs["answer"].mean() < 0.7


def test_logical_deduction_puzzles_are_solvable():
    rng = random.Random(0)
    sizes = set()
    for _ in range(200):
        context, choices, answer = grammar.logical_deduction(rng)
        clues = re.findall(r"(\w+) is left of (\w+)", context)
        people = {p for c in clues for p in c}
        sizes.add(len(people))
        assert len(choices) == len(people)
        lefts, rights = {a for a, _ in clues}, {b for _, b in clues}
        expected = (lefts - rights) if context.endswith("first is") else (rights - lefts)
        assert len(expected) == 1 and choices[answer] == f"{expected.pop()} ."
    assert sizes == {3, 4, 5}


def test_syllogism_answer_follows_from_premises():
    rng = random.Random(1)
    for _ in range(50):
        context, choices, answer = grammar.syllogism(rng)
        y = re.match(r"every \w+ is a (\w+)", context).group(1)
        assert choices[answer] == f"{y} ."


def test_roundtrip_parquet(tmp_path):
    frame = evalsets.generate(5, seed=0)
    evalsets.write(frame, tmp_path / "e.parquet")
    back = evalsets.read(tmp_path / "e.parquet")
    assert back.to_dict("records") == frame.to_dict("records")
    with pytest.raises(PipelineError, match="missing Parquet file"):
        evalsets.read(tmp_path / "nope.parquet")
    with pytest.raises(PipelineError, match="distinct items of 'word_order'"):
        evalsets.generate(10_000, seed=0, sets=["word_order"])
