"""A retired config key is refused in one line naming the key that replaced it, wherever it
was set (a file, an environment variable, --set)."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.config import RENAMED, SECTIONS, build_config
from swarm.config.load import load_config
from swarm.config.renames import REMOVED
from swarm.core.errors import ConfigError


def is_key(dotted: str) -> bool:
    section, _, key = dotted.partition(".")
    return section in SECTIONS and key in {f.name for f in dataclasses.fields(SECTIONS[section])}


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_every_new_name_is_a_key_and_no_old_one_is(old, new):
    assert is_key(new) and not is_key(old)


@pytest.mark.parametrize("old", sorted(REMOVED))
def test_a_removed_key_is_no_key(old):
    assert not is_key(old)


def value_of(dotted: str):
    section, _, key = dotted.partition(".")
    field = next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == key)
    return field.default


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_an_old_key_in_a_file_names_its_new_one(old, new):
    section, _, key = old.partition(".")
    with pytest.raises(ConfigError) as caught:
        build_config({section: {key: value_of(new)}}, "node.toml")
    message = str(caught.value)
    assert message == f"node.toml: {old} is now {new}" and "\n" not in message


def test_an_old_key_from_set_or_the_environment_names_its_new_one():
    old, new = next(iter(RENAMED.items()))
    section, _, key = old.partition(".")
    variable = f"SWARM__{section.upper()}__{key.upper()}"
    with pytest.raises(ConfigError, match=f"^--set: {old} is now {new}$"):
        load_config(overrides=[f"{old}=1"], env={})
    with pytest.raises(ConfigError, match=f"^environment variable {variable}: {old} is now {new}$"):
        load_config(env={variable: "1"})


@pytest.mark.parametrize("old", sorted(REMOVED))
def test_a_removed_key_says_why_on_one_line(old):
    section, _, key = old.partition(".")
    with pytest.raises(ConfigError) as caught:
        build_config({section: {key: True}}, "node.toml")
    message = str(caught.value)
    assert message.startswith(f"node.toml: {old} is no longer a config key: ")
    assert "\n" not in message


def test_an_unknown_key_still_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'shared_groups'"):
        build_config({"sharing": {"shared_group": 2}}, "node.toml")
