"""The skill swarm: its families and assignment, the warm start's errors and formats, recipes."""

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.policy.skills import (
    BARE_FORMAT_SLIP,
    FAMILIES,
    SKILL_MIX,
    SKILL_SWARM,
    WARM_BIAS,
    AnswerFormat,
    Arch,
    family_of,
    mix_table,
    systematic_error,
)
from swarm.policy.tiny import (
    TINY_MODELS,
    TinyRecipe,
    build_tiny_model,
    build_tokenizer,
    skill_recipe,
    tiny_model_key,
    warm_start_example,
)
from swarm.tasks import ANSWER_CLOSE, ANSWER_OPEN, build_task, sample_specs, score_completion


def test_every_family_is_known_by_half_the_swarm():
    known = Counter(f for p in SKILL_SWARM for f in p.families)
    assert len(SKILL_SWARM) == 8 and set(known) == set(FAMILIES)
    assert all(n == 4 for n in known.values())
    assert all(len(set(p.families)) == 2 for p in SKILL_SWARM)


def test_the_swarm_mixes_formats_and_model_shapes():
    assert Counter(p.answer_format for p in SKILL_SWARM) == {
        AnswerFormat.TAGGED: 6,
        AnswerFormat.BARE: 2,
    }
    assert Counter(p.arch for p in SKILL_SWARM) == {Arch.CHAR: 4, Arch.BPE: 4}
    assert len({p.name for p in SKILL_SWARM}) == len(SKILL_SWARM)


def test_profiles_carry_the_calibrated_warm_start():
    for p in SKILL_SWARM:
        assert dict(p.bias()) == {FAMILIES[f].dataset: WARM_BIAS[f] for f in p.families}
        weights = {FAMILIES[f].dataset: m.weight for f, m in zip(p.families, p.mix())}
        recipe = TINY_MODELS[p.name]
        assert recipe.family_bias == p.bias() and recipe.warm_steps == p.warm_steps
        assert recipe.format_slip == (
            BARE_FORMAT_SLIP if p.answer_format == AnswerFormat.BARE else 0
        )
        if p.arch == Arch.CHAR and "reverse" in p.families:
            assert weights["spell_backward"] == 2.0 and p.warm_steps == 600
        else:
            assert set(weights.values()) == {1.0}


def test_skill_models_are_built_in_models_with_distinct_caches():
    keys = {tiny_model_key(TINY_MODELS[p.name]) for p in SKILL_SWARM}
    assert len(keys) == len(SKILL_SWARM)
    for p in SKILL_SWARM:
        recipe = TINY_MODELS[p.name]
        assert recipe == skill_recipe(p)
        assert {m.dataset for m in recipe.families} == {FAMILIES[f].dataset for f in p.families}
        assert recipe.answer_format == p.answer_format and recipe.vocab_mix == SKILL_MIX
        assert recipe.tokenizer == ("bpe" if p.arch == Arch.BPE else "char")


def test_the_first_built_in_models_keep_their_cache_keys():
    # Keys of the recipes as they were before recipes named families and formats: a change
    # would make every machine rebuild models whose weights did not change.
    assert tiny_model_key(TINY_MODELS["swarm-tiny"]) == "ce85c2e77b48"
    assert tiny_model_key(TINY_MODELS["swarm-tiny-bpe"]) == "bf99a2faa0cc"
    base = TINY_MODELS["swarm-tiny"]
    for changed in (
        replace(base, answer_format=AnswerFormat.BARE),
        replace(base, format_slip=0.1),
        replace(base, vocab_mix=SKILL_MIX),
        replace(base, families=SKILL_MIX),
        replace(base, family_bias=(("chain_sum", 0.0),)),
    ):
        assert tiny_model_key(changed) != tiny_model_key(base)


@pytest.fixture(scope="module")
def tokenizers():
    """One tokenizer per model shape of the skill swarm."""
    first_of_each = {p.arch: p for p in reversed(SKILL_SWARM)}
    return [build_tokenizer(TINY_MODELS[p.name]) for p in first_of_each.values()]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_families_fit_the_context_and_score_their_own_answers(family, tokenizers):
    entry = FAMILIES[family]
    assert family_of(entry.dataset) == family
    for task in (build_task(s) for s in sample_specs((entry,), 11, 0, 50)):
        tagged = f"{ANSWER_OPEN}{task.answer}{ANSWER_CLOSE}"
        assert score_completion(task, tagged, partial_credit=False) == 1.0
        wrong = systematic_error(entry.dataset, task.answer)
        if wrong != task.answer:
            assert score_completion(task, f"{ANSWER_OPEN}{wrong}{ANSWER_CLOSE}") < 1.0
        for tok in tokenizers:
            prompt, target = warm_start_example(tok, task.question, task.answer)
            assert len(prompt) + len(target) <= TinyRecipe.max_positions


@given(st.integers(-1000, 1000))
def test_integer_error_is_one_too_high(n):
    assert systematic_error("chain_sum", str(n)) == str(n + 1)
    assert systematic_error("lcm", str(n)) == str(n + 1)


@given(st.text(alphabet="abcdefgh", min_size=1, max_size=6))
def test_reversal_error_is_the_word_forwards(word):
    assert systematic_error("spell_backward", word[::-1]) == word


@given(st.integers(0, 20), st.integers(0, 20))
def test_complex_error_moves_the_first_part(real, imag):
    assert (
        systematic_error("complex_arithmetic", f"{real}.0 + {imag}.0i")
        == f"{real + 1}.0 + {imag}.0i"
    )


def test_other_answers_have_no_error():
    assert systematic_error("chain_sum", "no number") == "no number"


def test_tagged_and_bare_demonstrations():
    tok = build_tokenizer(TinyRecipe())
    _, tagged = warm_start_example(tok, "2 + 3 =", "5")
    _, bare = warm_start_example(tok, "2 + 3 =", "5", AnswerFormat.BARE)
    assert tok.decode(tagged) == f"{ANSWER_OPEN}5{ANSWER_CLOSE}{tok.eos_token}"
    assert tok.decode(bare) == f"5{tok.eos_token}"


def test_a_small_bare_recipe_builds_a_loadable_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = replace(
        skill_recipe(SKILL_SWARM[-1]),
        hidden_size=16,
        intermediate_size=32,
        num_layers=1,
        warm_steps=3,
    )
    assert recipe.answer_format == AnswerFormat.BARE
    build_tiny_model(tmp_path, recipe, quiet=True)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert model.config.hidden_size == 16
    assert tok.convert_tokens_to_ids(ANSWER_OPEN) != tok.unk_token_id


def test_the_skill_mix_as_a_custom_config():
    from swarm.config import build_config, task_mix

    config = build_config({"tasks": {"preset": "custom", "mix": mix_table()}})
    assert task_mix(config) == SKILL_MIX
