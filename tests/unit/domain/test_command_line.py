"""The command-line split (domain/command_line.py) against the standard library's: the same
words, or the same refusal, for any text of quotes, backslashes, spaces and word characters;
and texts that took ``shlex`` seconds split whole."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from skiff.domain import command_line

#: What the rules turn on (quotes, the backslash, the four spaces that part words), and
#: characters that are word characters to a POSIX split but not to ``str.split``.
PIECES = ["a", "b", "é", " ", "\t", "\n", "\r", "'", '"', "\\", "#", "$", "\x0b", "\x0c", "\u00a0"]


def shlex_answer(text: str) -> tuple[str, object]:
    try:
        return "words", shlex.split(text)
    except ValueError as exc:
        return "refused", str(exc)


def our_answer(text: str) -> tuple[str, object]:
    try:
        return "words", command_line.split(text)
    except ValueError as exc:
        return "refused", str(exc)


@settings(max_examples=1500)
@given(st.lists(st.sampled_from(PIECES), max_size=24).map("".join))
@example('a "b\\"c" \'d\\\' e')
@example('"unclosed\\')
@example("trailing\\")
@example("'' \"\" x")
def test_it_splits_as_shlex_does(text: str) -> None:
    assert our_answer(text) == shlex_answer(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("python handler.py --model 'my model'", ["python", "handler.py", "--model", "my model"]),
        ('bash -c "echo \\"hi\\" \\$HOME"', ["bash", "-c", 'echo "hi" \\$HOME']),
        ("a\\ b  c", ["a b", "c"]),
        ("  ", []),
    ],
)
def test_the_usual_commands_split_into_their_words(text: str, words: list[str]) -> None:
    assert command_line.split(text) == words


def test_a_megabyte_word_or_a_megabyte_of_escapes_is_split_whole() -> None:
    """``shlex`` took about 20 s for the first (worse than linear in a word's length)."""
    long_word = "a" * 1_000_000
    assert command_line.split(long_word) == [long_word]
    escapes = '"' + '\\"' * 500_000 + '"'
    assert command_line.split(escapes) == ['"' * 500_000]
    with pytest.raises(ValueError, match="No closing quotation"):
        command_line.split("'" + "a" * 1_000_000)
