"""What ``/graphql`` accepts from a key holder, and what it refuses before any work is done.

A query is text the caller writes, so its size alone says little about what it costs: 3,000
aliases of ``myself`` in 215 KB took seconds to validate and answered megabytes. The limits
below stop such a query at the cheapest point, each with a short GraphQL error:

- the body: ``BODY_LIMIT`` (``api/graphql.py`` hands it to ``body_gate.BodyGate``: a 413 before
  the body is read);
- the parser (graphql-core's own options): at most ``MAX_TOKENS`` tokens and ``MAX_COMMENTS``
  comments, so a huge document is never turned into a tree;
- the shape (``QueryShape``, linear in the document): fields at most ``MAX_DEPTH`` deep, fragments
  followed, at most ``MAX_ALIASES`` aliases and ``MAX_FIELDS`` fields written;
- the cost (ariadne's ``cost_validator``, one per field asked for, fragments expanded): at most
  ``MAX_COST``;
- only then the specification's rules, one of which compares same-named fields pairwise;
- while it runs, what its answer holds (``Answer``): a list's items times the fields asked of
  each, at most ``MAX_ANSWER_FIELDS`` in all. The cost counts a list's fields once, however
  many items it has: 50 aliases of a user's 1,000 endpoints, each of which fits every limit
  above, asked for 80 MB and held the event loop for seconds.

Introspection (``__schema``, ``__type``) is off (``api/graphql.py``): ariadne's cost does not see
its fields, so a few aliases of it could ask for megabytes, and no client of skiff's needs it.

The runpod SDK's largest query (``get_pods``) asks for 31 fields, 5 deep, in about a hundred
tokens, with no alias; runpod-flash's for about 30 fields, 3 deep. Every limit is ten times or
more what they use, so no real client meets one.

Text no skiff value can hold is refused here too: NUL (PostgreSQL text cannot store it, so it
reached the database as an internal error) and lone UTF-16 surrogates (not Unicode text), in
the query's strings, however they are escaped, and in the variables.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Collection
from typing import Any

from ariadne.validation import cost_validator
from attrs import define, field
from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    InlineFragmentNode,
    NoFragmentCyclesRule,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    TypeInfo,
    parse,
    validate,
)
from graphql.validation import ASTValidationRule, ValidationContext, ValidationRule

#: The largest request body ``/graphql`` reads: a query is text, and the SDK's largest is under
#: 1 KB (a template with many env vars a few KB more).
BODY_LIMIT = 1024 * 1024
#: Lexical tokens a query may have (comments aside): the SDK's largest has about 100, and each
#: env var of a template adds 9.
MAX_TOKENS = 10_000
#: Comments a query may have: none of the SDK's has one.
MAX_COMMENTS = 1_000
#: How deep fields may nest: ``myself { pods { runtime { ports { ip } } } }`` is 5, the deepest
#: the schema has.
MAX_DEPTH = 10
#: Aliases in one query: the SDK and runpod-flash use none; a few dozen pods asked for by id at
#: once still fit.
MAX_ALIASES = 50
#: Fields a query asks for, fragments expanded (ariadne's cost, 1 per field): the SDK's largest
#: asks for 31.
MAX_COST = 500
#: Fields written in a query, ``__typename`` included: the cost does not see it, and the same
#: field written thousands of times makes a specification rule quadratic.
MAX_FIELDS = 500
#: Fields of list items one answer may hold, each item counted once per field asked of it
#: (nested fields included): a full read of 1,000 endpoints, about 30 fields each, is 30,000.
MAX_ANSWER_FIELDS = 100_000
#: The longest error message sent: a message may quote a name or a value of the query.
MAX_MESSAGE = 300

NUL_REFUSED = "NUL characters are not accepted"
SURROGATE_REFUSED = "lone UTF-16 surrogates are not accepted"

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class Refusal(GraphQLError):
    """A query refused by one of this module's limits (not by the specification's rules)."""


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be taken (a NUL, a lone surrogate), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return NUL_REFUSED if found.group() == "\x00" else SURROGATE_REFUSED


def unstorable_value(value: Any) -> str | None:
    """``unstorable`` for each string of a decoded JSON value (the variables), keys included.
    Walked with a stack: JSON nests deeper than Python recurses."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts: Collection[str] = (item,)
        elif isinstance(item, dict):
            texts = item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
            continue
        else:
            continue
        for text in texts:
            if (why := unstorable(text)) is not None:
                return why
    return None


def short(message: str) -> str:
    """An error message as sent and logged: its first line, at most ``MAX_MESSAGE`` long."""
    line = message.split("\n", 1)[0]
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def parse_query(_context: Any, data: dict[str, Any]) -> DocumentNode:
    """ariadne's ``query_parser``: graphql-core's parser, stopped past the token limits. No
    locations: errors are sent without them, and the tree is smaller."""
    return parse(
        data["query"],
        no_location=True,
        max_lexical_tokens=MAX_TOKENS,
        max_comments=MAX_COMMENTS,
    )


def _nesting(selection_set: SelectionSetNode) -> tuple[int, list[tuple[str, int]]]:
    """How deep fields nest under ``selection_set``, and each fragment spread with the depth
    it is at (an inline fragment adds no depth; neither does a spread)."""
    deepest = 0
    spreads: list[tuple[str, int]] = []
    stack = [(selection_set, 0)]
    while stack:
        selections, depth = stack.pop()
        for selection in selections.selections:
            if isinstance(selection, FieldNode):
                deepest = max(deepest, depth + 1)
                if selection.selection_set is not None:
                    stack.append((selection.selection_set, depth + 1))
            elif isinstance(selection, InlineFragmentNode):
                stack.append((selection.selection_set, depth))
            elif isinstance(selection, FragmentSpreadNode):
                spreads.append((selection.name.value, depth))
    return deepest, spreads


def _fragment_depths(document: DocumentNode) -> dict[str, int]:
    """Each fragment's depth with the fragments it spreads, each fragment walked once (a spread
    may be reached many ways). Walked with a stack, a spread that closes a cycle adding nothing:
    ``NoFragmentCyclesRule`` refuses cycles."""
    nestings = {
        definition.name.value: _nesting(definition.selection_set)
        for definition in document.definitions
        if isinstance(definition, FragmentDefinitionNode)
    }
    depths: dict[str, int] = {}
    for root in nestings:
        if root in depths:
            continue
        path = [(root, iter(nestings[root][1]))]
        on_path = {root}
        while path:
            name, spreads = path[-1]
            for spread, _depth in spreads:
                if spread in nestings and spread not in depths and spread not in on_path:
                    path.append((spread, iter(nestings[spread][1])))
                    on_path.add(spread)
                    break
            else:
                path.pop()
                on_path.remove(name)
                own, inner = nestings[name]
                depths[name] = max([own, *(at + depths.get(s, 0) for s, at in inner)])
    return depths


class QueryShape(ValidationRule):
    """At most ``MAX_DEPTH`` deep (fragments followed), ``MAX_ALIASES`` aliases and
    ``MAX_FIELDS`` fields. graphql-core and ariadne have no such rule; counting is linear in the
    document, so it runs before the specification's rules and ariadne's cost."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        self.fields = 0
        self.aliases = 0

    def enter_document(self, node: DocumentNode, *_args: Any) -> None:
        fragments = _fragment_depths(node)
        for definition in node.definitions:
            if not isinstance(definition, OperationDefinitionNode):
                continue
            own, spreads = _nesting(definition.selection_set)
            depth = max([own, *(at + fragments.get(name, 0) for name, at in spreads)])
            if depth > MAX_DEPTH:
                self.report_error(
                    Refusal(f"the query is too deep: {depth} fields nested, at most {MAX_DEPTH}")
                )
                return

    def enter_field(self, node: FieldNode, *_args: Any) -> None:
        # Each limit said once, however far past it the query goes.
        self.fields += 1
        if self.fields == MAX_FIELDS + 1:
            self.report_error(Refusal(f"the query has too many fields: at most {MAX_FIELDS}"))
        if node.alias is not None:
            self.aliases += 1
            if self.aliases == MAX_ALIASES + 1:
                self.report_error(Refusal(f"the query has too many aliases: at most {MAX_ALIASES}"))


class StorableStrings(ValidationRule):
    """Strings of the query holding NUL or a lone surrogate, however they were escaped
    (``\\u0000``, ``\\u{0}``, a block string), refused before a resolver passes them on."""

    def enter_string_value(self, node: StringValueNode, *_args: Any) -> None:
        if (why := unstorable(node.value)) is not None:
            self.report_error(Refusal(why))


def fields_asked(
    selection_set: SelectionSetNode | None, fragments: dict[str, FragmentDefinitionNode]
) -> int:
    """How many fields ``selection_set`` asks for, nested ones and fragments included (the
    cost rule has bounded that already: at most ``MAX_COST``)."""
    asked = 0
    stack = [selection_set] if selection_set is not None else []
    while stack:
        for selection in stack.pop().selections:
            if isinstance(selection, FieldNode):
                asked += 1
                if selection.selection_set is not None:
                    stack.append(selection.selection_set)
            elif isinstance(selection, InlineFragmentNode):
                stack.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                fragment = fragments.get(selection.name.value)
                if fragment is not None:
                    stack.append(fragment.selection_set)
    return asked


@define(eq=False, repr=False, slots=False)
class FieldBudgets:
    """Each user's fields of list items across queries, on this server: a bucket of
    ``capacity`` filled again at ``per_second``. One answer is bounded by
    ``MAX_ANSWER_FIELDS`` (about half a second of the event loop); without a bound across
    answers, one key sending such queries back to back would hold the loop all the time. The
    defaults let a user read a full account of 1,000 endpoints every few seconds."""

    _capacity: int = 2 * MAX_ANSWER_FIELDS
    _per_second: int = MAX_ANSWER_FIELDS // 5
    #: Seconds, as the server's injected clock gives them.
    _clock: Callable[[], float] = time.monotonic
    #: user id -> (fields left, when counted); a user with a full bucket is not kept.
    _left: dict[str, tuple[float, float]] = field(init=False, factory=dict)

    def spend(self, user_id: str, fields: int) -> None:
        """Take ``fields`` from the user's bucket, or refuse (nothing taken)."""
        now = self._clock()
        left, at = self._left.get(user_id, (float(self._capacity), now))
        left = min(float(self._capacity), left + (now - at) * self._per_second)
        if fields > left:
            wait = math.ceil((fields - left) / self._per_second)
            raise Refusal(
                f"this user's GraphQL answers used their allowance of {self._capacity:,} fields "
                f"of list items ({self._per_second:,} more each second): retry in {wait} s"
            )
        left -= fields
        if left >= self._capacity:
            self._left.pop(user_id, None)
        else:
            self._left[user_id] = (left, now)


class Answer:
    """What one query's answer holds so far, counted as its lists are resolved, and spent from
    its user's ``FieldBudgets`` (``spend``; none: no allowance across answers)."""

    def __init__(
        self,
        most: int = MAX_ANSWER_FIELDS,
        spend: Callable[[int], None] | None = None,
    ) -> None:
        self.most = most
        self.fields = 0
        self._spend = spend

    def charge(self, items: int, selection_set: SelectionSetNode | None, fragments: Any) -> None:
        """Count ``items`` of a list, each with the fields ``selection_set`` asks; refuse the
        list (a GraphQL error on that field, its items unread) past the allowance."""
        added = items * max(1, fields_asked(selection_set, fragments))
        wanted = self.fields + added
        if wanted > self.most:
            raise Refusal(
                f"the answer would hold more than {self.most:,} fields of list items: ask for "
                "fewer fields, or each list once rather than under several aliases"
            )
        if self._spend is not None:
            self._spend(added)
        self.fields = wanted


#: ariadne's cost rule: one per field asked for (``default_cost``), fragments expanded. No
#: variables: the cost reads none (no field has a multiplier), and the errors it finds on the
#: way (a missing argument) are left to the specification's rules, which word them better.
_Cost = cost_validator(MAX_COST, default_cost=1)


def _cost_exceeded(error: GraphQLError) -> bool:
    return "cost" in (error.extensions or {})


def validate_query(
    schema: GraphQLSchema,
    document_ast: DocumentNode,
    rules: Collection[type[ASTValidationRule]] | None = None,
    max_errors: int | None = None,
    type_info: TypeInfo | None = None,
) -> list[GraphQLError]:
    """ariadne's ``query_validator``: the limits, each stage only once the one before found
    nothing, so that the costly stages only ever see a small document: the shape and the
    strings (and fragment cycles, which the cost would follow forever), then the cost, then the
    specification's ``rules`` (ariadne's choice, introspection's refusal included).
    ``type_info`` is the protocol's; graphql-core 3.3 takes none, and ariadne passes none."""
    limits = (QueryShape, StorableStrings, NoFragmentCyclesRule)
    found = validate(schema, document_ast, limits)
    if found:
        return found
    # Room for an error per token: the cost's by-the-way errors never cut it short.
    costed = validate(schema, document_ast, (_Cost,), MAX_TOKENS)
    exceeded = [error for error in costed if _cost_exceeded(error)]
    if exceeded:
        return [Refusal(short(exceeded[0].message))]
    return validate(schema, document_ast, rules, max_errors)
