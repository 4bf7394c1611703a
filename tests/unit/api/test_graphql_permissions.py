"""Which GraphQL operation a key may run: a query reads, a mutation writes, and of a document
with several operations only the one named by ``operationName`` counts."""

from graphql import parse

from skiff.api.graphql import lacking
from skiff.domain.permissions import ALL, READ_ONLY, Access, Caller, Kind, Permissions
from skiff.domain.users import User

ANN = User("u1", "ann", False, 0.0)
BOTH = "query Me { myself { id } } mutation Save { saveTemplate(input: {}) { id } }"


def _caller(permissions: Permissions) -> Caller:
    return Caller(ANN, permissions, "k1")


def test_a_read_only_key_runs_the_named_query_of_a_document_with_a_mutation() -> None:
    assert lacking(_caller(READ_ONLY), parse(BOTH), "Me") is None
    why = lacking(_caller(READ_ONLY), parse(BOTH), "Save")
    assert why is not None and "lacks the permission read_write" in why


def test_without_a_name_every_operation_counts() -> None:
    assert lacking(_caller(READ_ONLY), parse(BOTH), None) is not None
    assert lacking(_caller(ALL), parse(BOTH), None) is None


def test_a_restricted_key_runs_no_operation() -> None:
    restricted = Permissions(Kind.RESTRICTED, {"ep1": Access.READ_WRITE})
    why = lacking(_caller(restricted), parse("{ myself { id } }"), None)
    assert why is not None and "on the account" in why
