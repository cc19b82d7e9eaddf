"""Skill profiles: built-in models that know different things, for a heterogeneous swarm.

SAPO's premise is that nodes discover different things, so a peer's rollouts can teach what
a node's own cannot. A swarm of identical models on one task cannot test that. This module
describes a swarm that can: four task families whose answers differ in kind (a small
integer sum, a simplified fraction `a/b`, a reversed three-letter word, a sum of complex
numbers written `a.0 + b.0i`), and eight built-in models, each warm-started on two of them, in one
of two answer formats, at one of two sizes.

- On a family it was warmed on, a model samples the right answer often but not always
  (partly learnt, or shown a family-specific systematic error, `systematic_error`, in
  some of its examples), so most of its groups there carry signal.
- On a family it was not warmed on, it answers in the wrong kind (a number for a word), so
  almost none of its groups carry signal: only peers can teach it that family.
- A model warmed with "bare" answers (the answer text alone) rarely writes the `<answer>`
  tag; under the strict answer rule (`swarm.tasks.AnswerRule.TAGGED`) its own groups carry
  no signal until it learns the format, which only tagged peers show it.

Several of these families' reasoning-gym scorers give partial credit (an output containing
the answer, letters in the right place, a complex number nearby); the premise holds for
rewards without it (`score_completion(..., partial_credit=False)`), see docs/SAPO.md.

Pure data and one pure function; `swarm.policy.tiny` turns profiles into recipes and models.
`scripts/sapo_calibrate.py` measures what each model actually does on each family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

from swarm.tasks import MixEntry


class AnswerFormat(StrEnum):
    """How a warm start writes its answers."""

    TAGGED = "tagged"  # <answer>x</answer>
    BARE = "bare"  # x


class Arch(StrEnum):
    """The two model shapes of the skill swarm (see `swarm.policy.tiny.TINY_MODELS`)."""

    CHAR = "char"  # char-level tokenizer, hidden 128, 4 layers (~0.87M parameters)
    BPE = "bpe"  # byte-level BPE tokenizer, hidden 96, 3 layers (~0.37M parameters)


# The four families. Short questions (at most ~105 characters) and short answers, so
# prompts fit the tiny models' 256 positions and a warm start costs a minute or two.
_ONE_DIGIT_PAIR = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
_SMALL_FRACTIONS = {"min_value": 1, "max_value": 9, "min_factor": 2, "max_factor": 5}
_SMALL_COMPLEX = {"min_real": 0, "max_real": 4, "min_imag": 0, "max_imag": 4}
FAMILIES: dict[str, MixEntry] = {
    "sum": MixEntry("chain_sum", 1.0, _ONE_DIGIT_PAIR),
    "fraction": MixEntry("fraction_simplification", 1.0, {**_SMALL_FRACTIONS, "styles": ["plain"]}),
    "reverse": MixEntry("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 3}),
    "complex": MixEntry(
        "complex_arithmetic",
        1.0,
        {**_SMALL_COMPLEX, "operations": ["+"], "operations_weights": [1.0]},
    ),
}
SKILL_MIX: tuple[MixEntry, ...] = tuple(FAMILIES.values())

# How a warm start treats each family, calibrated with scripts/sapo_calibrate.py so that a
# model samples the right answer to a family it knows often but far from always: the share
# of its examples that show the family's systematic error instead of the right answer.
# Reversal is learnt slowest and is never shown wrongly; sums and fractions are learnt
# fast, so half their examples are wrong.
WARM_BIAS: dict[str, float] = {"sum": 0.5, "fraction": 0.5, "reverse": 0.0, "complex": 0.25}
# A bare-format warm start writes this share of its examples tagged: its model then tags
# an answer now and then (a few % of completions), so it could find the format alone.
BARE_FORMAT_SLIP = 0.03


def mix_table(families: tuple[str, ...] = tuple(FAMILIES)) -> list[dict]:
    """`families` as `tasks.mix` config entries (with `tasks.preset = "custom"`)."""
    return [
        {"dataset": FAMILIES[f].dataset, "weight": 1.0, "config": dict(FAMILIES[f].config)}
        for f in families
    ]


def family_of(dataset: str) -> str:
    """The family name of a reasoning-gym dataset in the skill mix ('' if it is not in it)."""
    return next((name for name, entry in FAMILIES.items() if entry.dataset == dataset), "")


@dataclass(frozen=True)
class SkillProfile:
    """One node of the skill swarm: what its warm start covers, in which format, at which size."""

    name: str  # the built-in model's name, usable as policy.model
    families: tuple[str, ...]  # keys of FAMILIES
    answer_format: AnswerFormat
    arch: Arch
    warm_steps: int = 400
    weights: tuple[float, ...] = ()  # how often the warm start shows each family (default 1)
    weak: tuple[str, ...] = ()  # families whose every example shows the systematic error
    seed: int = 0  # the warm start's seed (initial weights, draws of errors)

    def mix(self) -> tuple[MixEntry, ...]:
        """The warm start's task mix: this profile's families, with their weights."""
        weights = self.weights or (1.0,) * len(self.families)
        return tuple(
            replace(FAMILIES[f], weight=w) for f, w in zip(self.families, weights, strict=True)
        )

    def bias(self) -> tuple[tuple[str, float], ...]:
        """(dataset, share of examples showing its systematic error) for each family."""
        return tuple(
            (FAMILIES[f].dataset, 1.0 if f in self.weak else WARM_BIAS.get(f, 0.0))
            for f in self.families
        )


def _profile(i: int, families: tuple[str, str], fmt: AnswerFormat, arch: Arch) -> SkillProfile:
    """A profile with its warm-start length: a BPE model is smaller and sees ~3x fewer tokens
    per question, so it takes twice the steps in less time. A char-level model learns reversal
    only after ~250 steps of it (measured: 1 % accuracy after ~200, 54 % after ~270), so a
    char profile with reversal warms up longer and shows reversal twice as often."""
    name = f"swarm-skill-{i}"
    if arch == Arch.BPE:
        return SkillProfile(name, families, fmt, arch, warm_steps=800)
    if "reverse" in families:
        weights = tuple(2.0 if f == "reverse" else 1.0 for f in families)
        return SkillProfile(name, families, fmt, arch, warm_steps=600, weights=weights)
    return SkillProfile(name, families, fmt, arch, warm_steps=400)


_T, _B = AnswerFormat.TAGGED, AnswerFormat.BARE
# Eight nodes; every family is known by four of them, every pair of families by at least
# one; two nodes answer bare; half are the smaller BPE model.
SKILL_SWARM: tuple[SkillProfile, ...] = (
    _profile(0, ("sum", "fraction"), _T, Arch.CHAR),
    _profile(1, ("reverse", "complex"), _T, Arch.CHAR),
    _profile(2, ("sum", "reverse"), _T, Arch.BPE),
    _profile(3, ("fraction", "complex"), _T, Arch.BPE),
    _profile(4, ("sum", "complex"), _T, Arch.CHAR),
    _profile(5, ("fraction", "reverse"), _T, Arch.BPE),
    _profile(6, ("sum", "fraction"), _B, Arch.BPE),
    _profile(7, ("reverse", "complex"), _B, Arch.CHAR),
)


# The gap swarm: where GRPO can carry what a node lacks. One shape and tokenizer (BPE), every
# node tagged and warm-started on all four families, but on two of them ("weak") every
# example shows the family's systematic error: the node answers in the right format and
# kind, one step off (a sum one too high, a word forwards), so its own groups there are
# all wrong while its peers' are mixed, and a peer's right answer is a near miss of its own.
# Each family is weak in four nodes and strong in four; nodes with the same weak pair differ
# in seed.
GAP_WARM_STEPS = 1600
_WEAK_PAIRS = (
    ("sum", "fraction"),
    ("reverse", "complex"),
    ("sum", "reverse"),
    ("fraction", "complex"),
    ("sum", "complex"),
    ("fraction", "reverse"),
    ("sum", "fraction"),
    ("reverse", "complex"),
)
GAP_SWARM: tuple[SkillProfile, ...] = tuple(
    SkillProfile(
        f"swarm-gap-{i}",
        tuple(FAMILIES),
        AnswerFormat.TAGGED,
        Arch.BPE,
        warm_steps=GAP_WARM_STEPS,
        weak=weak,
        seed=i,
    )
    for i, weak in enumerate(_WEAK_PAIRS)
)


_LEADING_NUMBER = re.compile(r"^\d+(?:\.\d+)?")


def systematic_error(dataset: str, answer: str) -> str:
    """The wrong answer a biased warm start shows for `answer`: one plausible mistake per family.

    A reversed word: the word forwards. A complex number or a fraction: its first number one
    too high (`3.0 + 2.0i` -> `4.0 + 2.0i`, `2/3` -> `3/3`). An integer: one too high. Anything else is returned
    unchanged (no bias).
    """
    if dataset == "spell_backward":
        return answer[::-1]
    if dataset in ("complex_arithmetic", "fraction_simplification"):
        return _LEADING_NUMBER.sub(lambda m: _plus_one(m.group()), answer, count=1)
    try:
        return str(int(answer) + 1)
    except ValueError:
        return answer


def _plus_one(number: str) -> str:
    """`number` + 1, keeping its decimal places ("3.0" -> "4.0", "7" -> "8")."""
    whole, dot, frac = number.partition(".")
    return f"{int(whole) + 1}{dot}{frac}"
