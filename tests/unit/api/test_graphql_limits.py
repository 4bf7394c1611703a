"""``/graphql``'s limits as validation (``api/graphql_limits.py``), against skiff's schema: the
runpod SDK's real queries pass every stage; a query too deep, with too many aliases, fields or
tokens, or costing too much once its fragments are expanded, is refused with one short error;
NUL and lone surrogates are refused however they are escaped."""

from __future__ import annotations

import time
from typing import Any

import pytest
from ariadne import make_executable_schema
from graphql import GraphQLError, GraphQLSchema
from graphql.validation import specified_rules
from runpod.api.mutations import container_register_auth as registry_auths
from runpod.api.mutations import endpoints as endpoint_mutations
from runpod.api.mutations import pods as pod_mutations
from runpod.api.mutations import templates as template_mutations
from runpod.api.mutations import user as user_mutations
from runpod.api.queries import endpoints as endpoint_queries
from runpod.api.queries import gpus as gpu_queries
from runpod.api.queries import pods as pod_queries
from runpod.api.queries import user as user_queries

from skiff.api.graphql import SDL
from skiff.api.graphql_limits import (
    MAX_ALIASES,
    MAX_COST,
    MAX_DEPTH,
    MAX_FIELDS,
    MAX_MESSAGE,
    MAX_TOKENS,
    NUL_REFUSED,
    SURROGATE_REFUSED,
    Refusal,
    parse_query,
    short,
    unstorable,
    unstorable_value,
    validate_query,
)

SCHEMA: GraphQLSchema = make_executable_schema(SDL)

#: What the runpod SDK 1.12.0 sends, each of its functions with every option it has given.
SDK_QUERIES = {
    "get_user": user_queries.QUERY_USER,
    "update_user_settings": user_mutations.generate_user_mutation("ssh-ed25519 AAAA me@host"),
    "get_gpus": gpu_queries.QUERY_GPU_TYPES,
    "get_gpu": gpu_queries.generate_gpu_query("NVIDIA GeForce RTX 4090", 2),
    "get_pods": pod_queries.QUERY_POD,
    "get_pod": pod_queries.generate_pod_query("pod-1"),
    "get_endpoints": endpoint_queries.QUERY_ENDPOINT,
    "create_pod": pod_mutations.generate_pod_deployment_mutation(
        "p",
        "img",
        "NVIDIA GeForce RTX 4090",
        data_center_id="local",
        country_code="US",
        gpu_count=1,
        volume_in_gb=1,
        container_disk_in_gb=5,
        min_vcpu_count=1,
        min_memory_in_gb=1,
        docker_args="python -c pass",
        ports="8888/http",
        volume_mount_path="/workspace",
        env={f"VAR_{i}": str(i) for i in range(50)},
        template_id="tpl",
        network_volume_id="vol",
        allowed_cuda_versions=["12.1"],
        min_download=1,
        min_upload=1,
    ),
    "create_cpu_pod": pod_mutations.generate_pod_deployment_mutation(
        "p", "img", instance_id="cpu3c-2-4"
    ),
    "stop_pod": pod_mutations.generate_pod_stop_mutation("pod-1"),
    "resume_pod": pod_mutations.generate_pod_resume_mutation("pod-1", 1),
    "terminate_pod": pod_mutations.generate_pod_terminate_mutation("pod-1"),
    "create_template": template_mutations.generate_pod_template(
        "t",
        "img",
        docker_start_cmd="python handler.py",
        container_disk_in_gb=10,
        volume_in_gb=10,
        volume_mount_path="/workspace",
        ports="8888/http",
        env={f"VAR_{i}": str(i) for i in range(200)},
        is_serverless=True,
        registry_auth_id="auth",
    ),
    "create_endpoint": endpoint_mutations.generate_endpoint_mutation(
        "e",
        "tpl",
        gpu_ids="AMPERE_16",
        network_volume_id="vol",
        locations="US",
        idle_timeout=5,
        scaler_type="QUEUE_DELAY",
        scaler_value=4,
        workers_min=0,
        workers_max=3,
        flashboot=True,
        allowed_cuda_versions="12.1",
        gpu_count=1,
    ),
    "update_endpoint_template": endpoint_mutations.update_endpoint_template_mutation("e", "t"),
    "create_container_registry_auth": registry_auths.generate_container_registry_auth(
        "n", "u", "p"
    ),
    "update_container_registry_auth": registry_auths.update_container_registry_auth("a", "u", "p"),
    "delete_container_registry_auth": registry_auths.delete_container_registry_auth("a"),
}


def errors_of(query: str) -> list[GraphQLError]:
    """What ``/graphql`` finds before running ``query``: the parser's error, or validation's."""
    try:
        document = parse_query(None, {"query": query})
    except GraphQLError as error:
        return [error]
    return validate_query(SCHEMA, document, specified_rules)


def messages_of(query: str) -> list[str]:
    return [error.message for error in errors_of(query)]


def aliased_ids(count: int) -> str:
    return "{ myself { " + " ".join(f"a{i}: id" for i in range(count)) + " } }"


def nested(depth: int) -> str:
    """A query ``depth`` fields deep (shape only: ``myself`` has no ``myself``)."""
    return "{ " + "myself { " * (depth - 1) + "id" + " }" * (depth - 1) + " }"


@pytest.mark.parametrize("name", sorted(SDK_QUERIES))
def test_every_query_of_the_runpod_sdk_passes_every_limit(name: str) -> None:
    assert errors_of(SDK_QUERIES[name]) == []


def test_a_query_at_the_alias_limit_passes_and_one_more_is_refused() -> None:
    assert errors_of(aliased_ids(MAX_ALIASES)) == []
    assert messages_of(aliased_ids(MAX_ALIASES + 1)) == [
        f"the query has too many aliases: at most {MAX_ALIASES}"
    ]


def test_3000_aliases_are_refused_by_the_parser_in_well_under_a_second() -> None:
    query = "{" + " ".join(f'p{i}: pod(input: {{podId: "pod-{i}"}}) {{ id }}' for i in range(3000))
    started = time.perf_counter()
    errors = messages_of(query + " }")
    assert time.perf_counter() - started < 1.0
    assert errors == [
        f"Syntax Error: Document contains more than {MAX_TOKENS} tokens. Parsing aborted."
    ]


def test_many_short_aliases_within_the_token_limit_are_refused_by_the_alias_limit() -> None:
    errors = errors_of(aliased_ids(3000))
    assert errors and all(isinstance(error, Refusal) for error in errors)
    assert f"the query has too many aliases: at most {MAX_ALIASES}" in [e.message for e in errors]


def test_a_query_deeper_than_the_limit_is_refused_before_the_schema_is_consulted() -> None:
    assert messages_of(nested(MAX_DEPTH + 1)) == [
        f"the query is too deep: {MAX_DEPTH + 1} fields nested, at most {MAX_DEPTH}"
    ]
    # At the limit the shape passes, and the schema's own rules speak.
    assert "too deep" not in " ".join(messages_of(nested(MAX_DEPTH)))


def test_depth_is_counted_through_fragments() -> None:
    chain = " ".join(
        f"fragment F{i} on User {{ myself {{ ...F{i + 1} }} }}" for i in range(MAX_DEPTH)
    )
    query = "{ myself { ...F0 } } " + chain + f" fragment F{MAX_DEPTH} on User {{ id }}"
    assert messages_of(query) == [
        f"the query is too deep: {MAX_DEPTH + 2} fields nested, at most {MAX_DEPTH}"
    ]


def test_the_same_field_written_past_the_field_limit_is_refused_typename_included() -> None:
    # The cost does not count __typename; written thousands of times, a specification rule
    # comparing same-named fields pairwise would take seconds.
    query = "{ myself {" + " __typename" * 3000 + " } }"
    started = time.perf_counter()
    assert messages_of(query) == [f"the query has too many fields: at most {MAX_FIELDS}"]
    assert time.perf_counter() - started < 1.0


def pods_through_a_fragment(fields: list[str]) -> str:
    """``MAX_ALIASES`` aliases of ``pods``, each spreading one fragment of ``fields``."""
    spreads = " ".join(f"p{i}: pods {{ ...P }}" for i in range(MAX_ALIASES))
    return "{ myself { " + spreads + " } } fragment P on Pod { " + " ".join(fields) + " }"


def test_fragments_spread_many_times_are_refused_by_their_expanded_cost() -> None:
    five = ["id", "name", "imageName", "desiredStatus", "costPerHr"]
    # 1 + 50 * (1 + 5) = 301 fields once expanded: taken.
    assert errors_of(pods_through_a_fragment(five)) == []
    # 1 + 50 * (1 + 10) = 551, though only 61 are written.
    ten = [*five, "gpuCount", "vcpuCount", "memoryInGb", "ports", "uptimeSeconds"]
    assert messages_of(pods_through_a_fragment(ten)) == [
        f"The query exceeds the maximum cost of {MAX_COST}. Actual cost is 551"
    ]


def test_a_fragment_spreading_itself_is_the_specifications_error_not_a_recursion() -> None:
    assert messages_of("{ myself { ...F } } fragment F on User { id ...F }") == [
        "Cannot spread fragment 'F' within itself."
    ]


@pytest.mark.parametrize(
    "literal",
    [r'"a\u0000b"', r'"a\u{0}b"', r'"a\u{000000}b"', '"""a\x00b"""'],
    ids=["escape", "braced escape", "long braced escape", "block string"],
)
def test_nul_in_a_string_of_the_query_is_refused_however_escaped(literal: str) -> None:
    assert messages_of(f"{{ pod(input: {{podId: {literal}}}) {{ id }} }}") == [NUL_REFUSED]


def test_a_lone_surrogate_escape_in_the_query_is_a_syntax_error() -> None:
    (message,) = messages_of(r'{ pod(input: {podId: "a\uD800b"}) { id } }')
    assert message.startswith("Syntax Error: Invalid Unicode escape sequence")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"input": {"podId": "a\x00b"}}, NUL_REFUSED),
        ({"input": {"env": [{"key": "K", "value": "\x00"}]}}, NUL_REFUSED),
        ({"in\x00put": 1}, NUL_REFUSED),
        ({"input": {"podId": "a\udfffb"}}, SURROGATE_REFUSED),
        ({"input": {"podId": "a😀b", "n": 1, "x": None, "ok": [True, 1.5]}}, None),
        (None, None),
    ],
)
def test_every_string_of_the_variables_keys_included_is_checked(
    value: Any, why: str | None
) -> None:
    assert unstorable_value(value) == why


def test_variables_nested_deeper_than_python_recurses_are_walked() -> None:
    deep: Any = "a\x00"
    for _ in range(100_000):
        deep = [deep]
    assert unstorable_value({"input": deep}) == NUL_REFUSED


def test_a_pair_of_surrogates_is_one_character_and_taken() -> None:
    assert unstorable("\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16")) is None


def test_a_message_is_sent_as_its_first_line_cut_short() -> None:
    assert short("Syntax Error: x\n\nGraphQL request:1:1\n1 | { x") == "Syntax Error: x"
    long = short("Cannot query field '" + "x" * 10_000 + "' on type 'User'.")
    assert len(long) == MAX_MESSAGE and long.endswith("…")
