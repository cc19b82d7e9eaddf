"""One word per thing: a retired synonym never comes back.

Each row of RETIRED is a word (a regex) the project stopped using, the word that replaced it
and why (docs/ARCHITECTURE.md, "Words"). Every text file under swarm/, docs/, node_config/
and tests/, and README.md, is scanned; a hit fails with its file and line. This file is the
one place the retired words may appear, besides the config's table of retired keys
(swarm/config/renames.py), which names each so that an old config is told its new key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from swarm.config import RENAMED
from swarm.config.renames import REMOVED

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
SCANNED = [ROOT / "swarm", ROOT / "docs", ROOT / "node_config", ROOT / "tests", ROOT / "README.md"]
SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".sh", ".cfg"}
THIS = Path(__file__).resolve()
RENAME_TABLE = ROOT / "swarm" / "config" / "renames.py"


@dataclass(frozen=True)
class Retired:
    pattern: str  # the retired word, as a regex
    kept: str  # the one word used instead
    why: str
    example: str  # a line the pattern must catch (so a broken regex cannot pass silently)
    allowed: str  # a line with the kept word that it must not catch

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


RETIRED = [
    Retired(
        r"\blists_per_round\b",
        "pull_lists",
        "peers asked for their announcements a round: one name, the config key's",
        "PullSettings(lists_per_round=8)",
        "PullSettings(pull_lists=8)",
    ),
    Retired(
        r"\bper_sender_cap\b",
        "per_peer_cap",
        "at most this many shared groups from one peer: one name, the config key's",
        "choose_pulls(per_sender_cap=2)",
        "choose_pulls(per_peer_cap=2)",
    ),
    Retired(
        r"\blibp2p[./]scoring\b",
        "peer_scores",
        "scoring means rewards (swarm.tasks.scoring); GossipSub's peer scores are peer_scores",
        "from swarm.p2p.libp2p.scoring import PENALTY",
        "from swarm.p2p.libp2p.peer_scores import PENALTY",
    ),
    Retired(
        r"(?i)\brejection[ _]hook\b",
        "refusal hook",
        "the transport's own refusals are refusals; rejections are a validator's or the intake's",
        "the transport's rejection hook (`refused`)",
        "the transport's refusal hook (`refused`)",
    ),
    Retired(
        r"\bpeer_rejections\b",
        "peer_refusals",
        "Libp2pStats counts the transport's refusals by RefusalReason",
        "stats.peer_rejections[reason.value] += 1",
        "stats.peer_refusals[reason.value] += 1",
    ),
    Retired(
        r"swarm[./]node[./]following\b|\bfollowing\.py\b|`Following`|\bFollowing[(.]\w*|\.following\b",
        "DeltaSync (swarm.node.delta_sync)",
        "the part follows a trainer and publishes this node's deltas: both are delta sync",
        "1. `Following.follow` (generator role only)",
        "1. `DeltaSync.follow` (generator role only); Following a trainer's policy: ...",
    ),
    Retired(
        r"swarm[./]node[./]parts\b|(?<![\w/])parts\.py\b",
        "swarm.node.assembler",
        "the module holding `assemble` and `Parts` is the assembler",
        "from swarm.node.parts import assemble",
        "from swarm.node.assembler import assemble; swarm/core/libp2p_parts.py",
    ),
    Retired(
        r"swarm[./]node[./]assembly\b|(?<![\w/])assembly\.py\b",
        "swarm.node.makers",
        "the module holding the make_* functions holds the part makers",
        "from swarm.node.assembly import make_generator",
        "from swarm.node.makers import make_generator",
    ),
    Retired(
        r"\bLocalGroup\b",
        "OwnGroup",
        "a group this node generated and scored is an own group",
        "def publish(self, groups: list[LocalGroup]) -> None:",
        "def publish(self, groups: list[OwnGroup]) -> None:",
    ),
    Retired(
        r"(?i)\blocal[ -]groups?\b|\bI local\b|\blocal (?:and|or|\+ \w+) shared\b",
        "own group(s)",
        "one word for a node's own groups (the ledger's and a unit's local_groups count keeps "
        "its name, so recorded files still read)",
        "a batch of I local + J shared groups",
        "a batch of I own + J shared groups; own_groups = 4  # I: own groups per update",
    ),
    Retired(
        r"(?<![\w.])(?:" + "|".join(re.escape(k) for k in [*RENAMED, *REMOVED]) + r")\b",
        "the new keys of swarm/config/renames.py (training.own_groups, [sharing], ...)",
        "a renamed or removed config key: docs and code name only the key a config accepts",
        "skip groups older than training.max_age_s",
        "skip groups held longer than sharing.max_held_s; reject older than verify.max_age_s",
    ),
    Retired(
        r"\bmax_version_gap\b",
        "max_version_lag (behind our version) or max_version_rewind (behind the sender's newest)",
        "the two version bounds are named by what they measure against",
        "Staleness(max_version_gap=1)",
        "Staleness(max_version_lag=1); VerifySettings(max_version_rewind=1000)",
    ),
    Retired(
        r"\b(?:chosen|useful)_local\b|\blocal_samples\b|\b(?:choice|batch)\.local\b",
        "own (chosen_own, useful_own, BatchChoice.own)",
        "the batch choice names a node's own groups own",
        "chosen = batch.local + batch.shared",
        "chosen = batch.own + batch.shared",
    ),
]


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for place in SCANNED:
        found = [place] if place.is_file() else sorted(place.rglob("*"))
        files += [p for p in found if p.is_file() and p.suffix in SUFFIXES]
    return [
        p for p in files if p.resolve() not in (THIS, RENAME_TABLE) and "__pycache__" not in p.parts
    ]


def hits(retired: Retired) -> list[str]:
    regex = retired.regex
    out = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                out.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return out


@pytest.mark.parametrize("retired", RETIRED, ids=lambda r: r.kept.split()[0])
def test_a_retired_word_is_nowhere(retired: Retired):
    found = hits(retired)
    assert not found, (
        f"retired word /{retired.pattern}/: say {retired.kept!r} ({retired.why}):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize("retired", RETIRED, ids=lambda r: r.kept.split()[0])
def test_each_pattern_catches_its_example_and_spares_the_kept_word(retired: Retired):
    assert retired.regex.search(retired.example), retired.example
    assert not retired.regex.search(retired.allowed), retired.allowed


def test_the_scan_reaches_every_place():
    files = {p.relative_to(ROOT).parts[0] for p in scanned_files()}
    assert {"swarm", "docs", "node_config", "tests", "README.md"} <= files


def test_every_kept_word_is_in_the_glossary():
    words = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## Words", 1)[1]
    for kept in (
        "refusal hook",
        "peer_refusals",
        "DeltaSync",
        "assembler",
        "makers",
        "OwnGroup",
        "own_groups",
        "max_held_s",
        "max_version_lag",
        "max_version_rewind",
    ):
        assert kept in words, kept
