"""What each kind of key may do, and which keys a key may make."""

import pytest

from skiff.domain.permissions import ALL, READ_ONLY, Access, Kind, Permissions, parse
from skiff.errors import Invalid

R, RW = Access.READ, Access.READ_WRITE
ONE = Permissions(Kind.RESTRICTED, {"ep1": R, "ep2": RW})


@pytest.mark.parametrize(
    ("permissions", "access", "endpoint", "allowed"),
    [
        (ALL, RW, None, True),
        (ALL, RW, "ep9", True),
        (READ_ONLY, R, None, True),
        (READ_ONLY, R, "ep9", True),
        (READ_ONLY, RW, None, False),
        (READ_ONLY, RW, "ep9", False),
        (ONE, R, None, False),
        (ONE, R, "ep1", True),
        (ONE, RW, "ep1", False),
        (ONE, RW, "ep2", True),
        (ONE, R, "ep9", False),
    ],
)
def test_each_kind_allows_what_it_says(
    permissions: Permissions, access: Access, endpoint: str | None, allowed: bool
) -> None:
    assert (permissions.missing(access, endpoint) is None) is allowed


def test_a_refusal_names_the_missing_permission() -> None:
    assert ONE.missing(RW, "ep1") == "this API key lacks the permission read_write on endpoint ep1"
    why = READ_ONLY.missing(RW, None)
    assert why is not None and "lacks the permission read_write" in why


@pytest.mark.parametrize(
    ("maker", "made", "allowed"),
    [
        (ALL, ONE, True),
        (READ_ONLY, ALL, False),
        (READ_ONLY, Permissions(Kind.RESTRICTED, {"ep1": R}), True),
        (READ_ONLY, ONE, False),
        (ONE, Permissions(Kind.RESTRICTED, {"ep2": R}), True),
        (ONE, Permissions(Kind.RESTRICTED, {"ep1": RW}), False),
        (ONE, READ_ONLY, False),
    ],
)
def test_a_key_makes_no_key_stronger_than_itself(
    maker: Permissions, made: Permissions, allowed: bool
) -> None:
    assert maker.covers(made) is allowed


def test_parse_takes_the_three_kinds() -> None:
    assert parse("all", None) == ALL
    assert parse("read", {}) == READ_ONLY
    assert parse("restricted", {"ep1": "read"}) == Permissions(Kind.RESTRICTED, {"ep1": R})


@pytest.mark.parametrize(
    ("kind", "endpoints", "field"),
    [
        ("admin", None, "permissions"),
        ("read", {"ep1": "read"}, "endpoints"),
        ("restricted", {}, "endpoints"),
        ("restricted", ["ep1"], "endpoints"),
        ("restricted", {"ep1": "write"}, "endpoints"),
    ],
)
def test_parse_refuses_what_is_not_a_permission(
    kind: object, endpoints: object, field: str
) -> None:
    with pytest.raises(Invalid) as refused:
        parse(kind, endpoints)
    assert refused.value.field == field
