"""Each preset says what it holds: some keys, each commented (tests/unit/config/test_config.py checks
the comments), the others at their defaults, where to list them."""

from pathlib import Path

import pytest

PRESETS = sorted((Path(__file__).parents[3] / "node_config").glob("*.toml"))
SAYS = "omitted keys take the defaults listed by `swarm-node config --keys`"


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_says_what_it_holds(path):
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("# "))
    text = " ".join(header)
    assert SAYS in text, f"{path.name}: its opening comment does not say what it holds"
    assert "every key listed" not in text  # a preset holds some keys, not all of them
