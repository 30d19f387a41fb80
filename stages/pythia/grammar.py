"""A small English-like grammar shared by the evaluation sets and the local suite's corpus.

Every generator takes a ``random.Random`` and returns ``(context, choices, answer)``: the
context (possibly empty), the candidate continuations and the index of the correct one. The
local suite is trained on the correct sentences of the same generators, so the evaluation sets
are learnable by a tiny model, while real Pythia models see ordinary English.
"""
from __future__ import annotations

import random

NOUNS = {  # singular -> plural
    "dog": "dogs", "cat": "cats", "bird": "birds", "horse": "horses", "fox": "foxes", "cow": "cows",
    "man": "men", "woman": "women", "child": "children", "teacher": "teachers", "farmer": "farmers",
}
VERBS = {  # third person singular -> plural
    "runs": "run", "sleeps": "sleep", "eats": "eat", "sings": "sing", "walks": "walk", "jumps": "jump",
    "waits": "wait", "smiles": "smile",
}
TRANSITIVE = {"sees": "see", "likes": "like", "follows": "follow", "helps": "help"}
PREPOSITIONS = ["near", "behind", "with", "beside"]
DETERMINERS = {"this": "these", "that": "those"}  # singular -> plural
CATEGORIES = {
    "animal": ["dog", "cat", "bird", "horse", "fox", "cow"],
    "fruit": ["apple", "pear", "plum", "grape", "lemon", "peach"],
    "tool": ["hammer", "saw", "drill", "wrench", "shovel", "chisel"],
    "color": ["red", "blue", "green", "yellow", "white", "black"],
}
ANTONYMS = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("happy", "sad"), ("old", "young"),
            ("tall", "short"), ("light", "dark"), ("up", "down"), ("open", "closed"), ("full", "empty"),
            ("early", "late"), ("rich", "poor")]
NONCE = ["wug", "blick", "dax", "fep", "zorp", "toma", "kiki", "bouba", "glorp", "snib", "vorn", "plim"]
NAMES = ["ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ida", "jon"]

# The sentence frames' fixed words, so the local tokenizer's vocabulary is closed.
FUNCTION_WORDS = ["the", "a", "an", "is", "not", "kind", "of", "opposite", "every", "so", "sit", "in", "row",
                  "left", "first", "last", "and", ",", ".", "i", "saw", "heard", "met"]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _noun_phrase(rng: random.Random, plural: bool) -> str:
    noun = rng.choice(list(NOUNS))
    return f"the {NOUNS[noun] if plural else noun}"


def subject_verb(rng: random.Random):
    """Syntax: the verb agrees with the head noun across a prepositional phrase with an attractor."""
    plural = rng.random() < 0.5
    subject = _noun_phrase(rng, plural)
    attractor = _noun_phrase(rng, not plural) if rng.random() < 0.5 else _noun_phrase(rng, plural)
    verb = rng.choice(list(VERBS))
    good, bad = (VERBS[verb], verb) if plural else (verb, VERBS[verb])
    return _pair(rng, f"{subject} {rng.choice(PREPOSITIONS)} {attractor}", f"{good} .", f"{bad} .")


def determiner_noun(rng: random.Random):
    """Syntax: demonstratives agree in number with their noun."""
    det = rng.choice(list(DETERMINERS))
    plural = rng.random() < 0.5
    noun = rng.choice(list(NOUNS))
    good, bad = (NOUNS[noun], noun) if plural else (noun, NOUNS[noun])
    det_word = DETERMINERS[det] if plural else det
    return _pair(rng, f"i {rng.choice(['saw', 'heard', 'met'])} {det_word}", f"{good} .", f"{bad} .")


def word_order(rng: random.Random):
    """Syntax: a well-formed transitive sentence against the same words scrambled."""
    s, o = rng.sample(list(NOUNS), 2)
    verb = rng.choice(list(TRANSITIVE))
    good = ["the", s, verb, "the", o, "."]
    bad = good[:]
    while bad == good:
        bad = ["the", "the", s, o, verb] if rng.random() < 0.5 else [s, "the", verb, o, "the"]
        bad = bad + ["."]
    return _pair(rng, "", " ".join(good), " ".join(bad))


def hypernym(rng: random.Random):
    """Semantics: the category a word belongs to (four choices)."""
    cats = list(CATEGORIES)
    cat = rng.choice(cats)
    word = rng.choice(CATEGORIES[cat])
    choices = [f"{c} ." for c in cats]
    rng.shuffle(choices)
    return f"{_article(word)} {word} is a kind of", choices, choices.index(f"{cat} .")


def negation(rng: random.Random):
    """Semantics under negation: what a word is NOT (the true category is the distractor)."""
    cats = list(CATEGORIES)
    cat = rng.choice(cats)
    other = rng.choice([c for c in cats if c != cat])
    word = rng.choice(CATEGORIES[cat])
    return _pair(rng, f"{_article(word)} {word} is not a kind of", f"{other} .", f"{cat} .")


def antonym(rng: random.Random):
    """Semantics: the opposite of an adjective (four choices)."""
    pairs = rng.sample(ANTONYMS, 4)
    a, b = pairs[0] if rng.random() < 0.5 else pairs[0][::-1]
    distractors = [rng.choice(p) for p in pairs[1:]]
    choices = [f"{w} ." for w in [b] + distractors]
    rng.shuffle(choices)
    return f"the opposite of {a} is", choices, choices.index(f"{b} .")


def syllogism(rng: random.Random):
    """Logic: every X is a Y . n is a X . so n is a ... (nonce words, so only the premises tell)."""
    x, y, z = rng.sample(NONCE, 3)
    name = rng.choice(NAMES)
    context = f"every {x} is a {y} . {name} is a {x} . so {name} is a"
    return _pair(rng, context, f"{y} .", f"{z} .")


def logical_deduction(rng: random.Random, n_objects: int | None = None):
    """Ordering puzzle with 3-5 people in a row: shuffled 'left of' clues, ask who is first or last."""
    n = n_objects or rng.choice([3, 4, 5])
    people = rng.sample(NAMES, n)  # the true left-to-right order
    listed = people[:]
    rng.shuffle(listed)
    clues = [f"{people[i]} is left of {people[i + 1]} ." for i in range(n - 1)]
    rng.shuffle(clues)
    intro = " , ".join(listed[:-1]) + f" and {listed[-1]} sit in a row ."
    which = rng.choice(["first", "last"])
    answer = people[0] if which == "first" else people[-1]
    choices = [f"{p} ." for p in listed]
    return f"{intro} {' '.join(clues)} the {which} is", choices, choices.index(f"{answer} .")


def _pair(rng: random.Random, context: str, good: str, bad: str):
    """A minimal pair as a two-way choice, in random order."""
    if rng.random() < 0.5:
        return context, [good, bad], 0
    return context, [bad, good], 1


DIAGNOSTIC = {
    "subject_verb": subject_verb, "determiner_noun": determiner_noun, "word_order": word_order,
    "hypernym": hypernym, "negation": negation, "antonym": antonym, "syllogism": syllogism,
}
GENERATORS = {**DIAGNOSTIC, "logical_deduction": logical_deduction}


def vocabulary() -> list[str]:
    """Every word the generators can emit (closed, sorted): the local suite's word-level vocabulary."""
    words = set(FUNCTION_WORDS) | set(NOUNS) | set(NOUNS.values()) | set(VERBS) | set(VERBS.values())
    words |= set(TRANSITIVE) | set(TRANSITIVE.values()) | set(PREPOSITIONS) | set(DETERMINERS)
    words |= set(DETERMINERS.values()) | set(CATEGORIES) | {w for ws in CATEGORIES.values() for w in ws}
    words |= {w for p in ANTONYMS for w in p} | set(NONCE) | set(NAMES)
    return sorted(words)


def sentence(rng: random.Random, weights: dict[str, float] | None = None) -> str:
    """One correct training text: a generator's context followed by its right answer."""
    names = list(GENERATORS)
    w = [1.0 if weights is None else float(weights.get(n, 0.0)) for n in names]
    context, choices, answer = GENERATORS[rng.choices(names, weights=w)[0]](rng)
    return f"{context} {choices[answer]}".strip()
