"""Presets follow the measured results: a preset that trains on peers' groups
(`sharing.shared_groups > 0`) says in one comment line which measured result it follows,

    # sharing follows: <file>[#<heading anchor>] (what was measured)

where <file> is relative to the repository root and exists, and #<anchor> is the GitHub
anchor of one of its headings. A preset that follows no measured result does not share; one
that says why sharing is off (`# sharing off until ...: <file>#<anchor>`) names a place that
exists too. Where the studies stand: docs/SAPO.md, each in full under docs/studies/."""

import re
from pathlib import Path

import pytest

from swarm.config.load import load_config

ROOT = Path(__file__).resolve().parents[3]
PRESETS = sorted((ROOT / "node_config").glob("*.toml"))
FOLLOWS = re.compile(r"^\s*#\s*sharing follows:\s*(\S+)")
OFF = re.compile(r"^\s*#\s*sharing off until [^:]*:\s*(\S+)")


def anchor(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it: lower case, punctuation dropped,
    each space a hyphen ("Measured: study 3's verdict" -> "measured-study-3s-verdict")."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found = set()
    for line in path.read_text().splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)$", line):
            found.add(anchor(m.group(1)))
    return found


def resolves(target: str) -> str | None:
    """Why `file[#anchor]` does not name a place in the repository (None where it does)."""
    file, _, fragment = target.rstrip(".,;)").partition("#")
    path = ROOT / file
    if not path.is_file():
        return f"{file} does not exist"
    if fragment and fragment not in anchors(path):
        return f"{file} has no heading with anchor #{fragment}"
    return None


def test_anchors_are_githubs():
    assert anchor("Measured: study 3's verdict") == "measured-study-3s-verdict"
    assert anchor("1. Questions per round, and I / J") == "1-questions-per-round-and-i--j"
    assert (
        anchor("Study 4: sharing that keeps a node's own learning (pre-registered)")
        == "study-4-sharing-that-keeps-a-nodes-own-learning-pre-registered"
    )


def test_a_missing_file_or_heading_does_not_resolve():
    assert resolves("docs/studies/3-default.md#measured-study-3s-verdict") is None
    assert "no heading" in resolves("docs/studies/3-default.md#measured-study-9s-verdict")
    assert "does not exist" in resolves("docs/NOPE.md")


def problems(path: Path) -> list[str]:
    """What is wrong with a preset's sharing and the line that should justify it."""
    lines = path.read_text().splitlines()
    follows = [m.group(1) for line in lines if (m := FOLLOWS.match(line))]
    out = []
    if load_config(path, env={}).sharing.shared_groups > 0:
        if len(follows) != 1:
            out.append(
                f"{path.name} shares (sharing.shared_groups > 0) without one line "
                "'# sharing follows: <file>#<anchor>' naming the measured result it follows"
            )
    elif follows:
        out.append(f"{path.name} names a result for sharing it does not do")
    for target in follows + [m.group(1) for line in lines if (m := OFF.match(line))]:
        if why := resolves(target):
            out.append(f"{path.name}: {why}")
    return out


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_a_preset_shares_only_following_a_measured_result(path):
    assert problems(path) == []


def test_the_check_catches_what_it_should(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text("[sharing]\nshared_groups = 4  # J\n")
    assert "without one line" in problems(preset)[0]
    preset.write_text(
        "[sharing]\nshared_groups = 4  # J\n# sharing follows: docs/SAPO.md#nowhere\n"
    )
    assert "no heading with anchor #nowhere" in problems(preset)[0]
    preset.write_text(
        "[sharing]\nshared_groups = 4  # J\n"
        "# sharing follows: docs/studies/3-default.md#measured-study-3s-verdict (what it measured)\n"
    )
    assert problems(preset) == []
    preset.write_text("[sharing]\nshared_groups = 0  # J\n# sharing follows: docs/SAPO.md\n")
    assert "does not do" in problems(preset)[0]
    preset.write_text("[sharing]\nshared_groups = 0  # J\n# sharing off until later: docs/X.md\n")
    assert "docs/X.md does not exist" in problems(preset)[0]
