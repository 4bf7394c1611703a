"""docs/settings.md is the settings reference: a row for every field of ``skiff.config.Settings``
with its ``SKIFF_`` name and its default, and no row for a setting that does not exist, so the
page cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic_core import PydanticUndefined

from skiff.config import Settings

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(SKIFF_[A-Z0-9_]+)` \| ([^|]*) \|")


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "settings.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            rows[match.group(1)] = match.group(2).strip()
    return rows


def _shown(default: object) -> set[str]:
    """How the page may write a default: the value the variable would be set to, in backticks
    (or "unset" for a setting that has none)."""
    if default is None:
        return {"unset"}
    if isinstance(default, bool):
        return {"true", "on"} if default else {"false", "off"}
    if isinstance(default, float) and default.is_integer():
        return {str(int(default))}
    return {str(default)}


def _written(cell: str) -> str:
    """The default a cell gives: its first backticked value, or "unset"."""
    if cell.startswith("unset"):
        return "unset"
    match = re.match(r"`([^`]*)`", cell)
    assert match, f"a default cell that starts with neither a `value` nor unset: {cell!r}"
    return match.group(1)


def _env_name(field: str) -> str:
    return f"SKIFF_{field.upper()}"


def test_every_setting_has_a_row_with_its_default() -> None:
    rows = _rows()
    for field, info in Settings.model_fields.items():
        name = _env_name(field)
        assert name in rows, f"docs/settings.md has no row for {name}"
        default = info.get_default(call_default_factory=True)
        assert default is not PydanticUndefined, f"{name} has no default"
        written = _written(rows[name])
        assert written in _shown(default), (
            f"{name}: docs/settings.md gives {written!r}, the code's default is {default!r}"
        )


def test_no_row_names_a_setting_that_does_not_exist() -> None:
    known = {_env_name(field) for field in Settings.model_fields}
    unknown = sorted(set(_rows()) - known)
    assert not unknown, f"docs/settings.md names settings skiff does not have: {unknown}"
