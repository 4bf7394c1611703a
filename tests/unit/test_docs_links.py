"""Every relative link in README.md and docs/*.md leads somewhere: to a file that exists and,
for a ``#anchor``, to a heading of that page (GitHub's anchors: the heading's text lower-cased,
spaces made '-', punctuation other than '-' and '_' dropped, a repeated heading numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target), the target up to a space (a title) or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*\]\(([^)\s]+)(?:\s[^)]*)?\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, inline code spans removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line) if not line.startswith("#") else line)
    return lines


def github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose(page.read_text()):
        match = re.match(r"^#{1,6} (.+?)#*\s*$", line)
        if match:
            base = github_anchor(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for line in _prose(page.read_text()) for m in LINK.finditer(line)]


def test_anchor_rules_follow_github() -> None:
    cases = {
        "Containers (`SKIFF_PROVIDER=docker`)": "containers-skiff_providerdocker",
        "Default workers: line-ups": "default-workers-line-ups",
        "The SDK's management calls (GraphQL)": "the-sdks-management-calls-graphql",
    }
    for heading, anchor in cases.items():
        assert github_anchor(heading) == anchor


def test_the_pages_have_links_to_check() -> None:
    # A guard on the pattern: the README's "where to go next" links into docs/.
    assert "docs/README.md" in links(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
