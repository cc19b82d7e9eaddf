"""The docs name only what exists: every file path and every `swarm.` or `lab.` module (or a
name in one) that README.md and the pages under docs/ mention is there in the code, and every
link between them reaches its file and heading."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.project.test_preset_sharing import anchors

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PATH = re.compile(
    r"(?<![\w./-])((?:swarm|lab|scripts|tests|node_config|docs|models|constraints)/[\w./-]*\w)"
)
DOTTED = re.compile(r"(?<![\w./-])((?:swarm|lab)(?:\.\w+)+)")
# Names shaped like code that are not: the swarm key file, and libp2p protocol IDs.
NOT_CODE = {"swarm.key", "swarm/policy/tensor/1", "swarm/policy/weights/1"}


def module_file(dotted: str) -> Path | None:
    """The source of a swarm or lab module or package, if it exists (found without importing)."""
    parts = dotted.split(".")
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_exists(dotted: str) -> bool:
    """`swarm.a.b` is a module, or `swarm.a` is one and defines `b` (a class, function, ...)."""
    if module_file(dotted) is not None:
        return True
    module, _, name = dotted.rpartition(".")
    source = module_file(module)
    if source is None:
        return False
    pattern = rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|\b{name}\b.*# re-export|\"{name}\""
    text = source.read_text(encoding="utf-8")
    return (
        re.search(pattern, text, re.M) is not None
        or f"import {name}" in text
        or f" {name}," in text
    )


def mentions(doc: Path) -> tuple[set[str], set[str]]:
    text = doc.read_text(encoding="utf-8")
    paths = {m.rstrip(".") for m in PATH.findall(text)} - NOT_CODE
    dotted = {m.rstrip(".") for m in DOTTED.findall(text)} - NOT_CODE
    return paths, dotted


def test_every_path_and_module_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        paths, dotted = mentions(doc)
        for p in sorted(paths):
            if "*" in p or "<" in p:
                continue
            if not (ROOT / p).exists():
                missing.append(f"{doc.name}: {p}")
        for d in sorted(dotted):
            if not dotted_exists(d):
                missing.append(f"{doc.name}: {d}")
    assert missing == []


def test_the_check_sees_a_stale_name(tmp_path):
    assert dotted_exists("swarm.core.errors") and dotted_exists("swarm.core.errors.SwarmError")
    assert not dotted_exists("swarm.node.pulling") and not dotted_exists("swarm.core.errors.Nope")
    doc = tmp_path / "x.md"
    doc.write_text("see `swarm/node/pulling.py`, swarm.replay, `lab/x.py` and lab.x\n")
    assert mentions(doc) == ({"swarm/node/pulling.py", "lab/x.py"}, {"swarm.replay", "lab.x"})


LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(doc: Path) -> list[str]:
    """Each relative link in doc whose file, or whose Markdown heading (#anchor), is not there."""
    out = []
    for link in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", link):
            continue  # https:, mailto:
        file, _, fragment = link.partition("#")
        target = (doc.parent / file).resolve() if file else doc
        if not target.exists():
            out.append(f"{doc.name}: {link} (no such file)")
        elif fragment and target.suffix == ".md" and fragment not in anchors(target):
            out.append(f"{doc.name}: {link} (no such heading)")
    return out


def test_every_link_between_the_docs_resolves():
    assert [problem for doc in DOCS for problem in broken_links(doc)] == []


def test_the_link_check_sees_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## A part\n")
    doc = tmp_path / "b.md"
    doc.write_text(
        "[ok](a.md#a-part) [x](a.md#gone) [y](c.md) [z](#title-b) [w](https://x.y)\n# Title b\n"
    )
    assert broken_links(doc) == ["b.md: a.md#gone (no such heading)", "b.md: c.md (no such file)"]
