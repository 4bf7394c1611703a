"""A command line split into words as ``shlex.split`` splits it (POSIX rules: single quotes keep
everything, double quotes keep all but ``\\"`` and ``\\\\``, a backslash outside quotes keeps the
next character, words end at unquoted spaces, tabs and line breaks), by regular expressions.

``shlex`` reads one character at a time in Python: about 3 µs a character, and worse than
linear for long words (a 1 MB argument took 20 s). A template's ``dockerArgs`` or a console
form's command is a tenant's text split on the event loop, so that was one request holding
every tenant's requests for seconds. The expressions below run in the regular expression
engine with possessive quantifiers (no backtracking), linear in the text; a property test
holds them to ``shlex.split``'s answers."""

from __future__ import annotations

import re

_SPACE = r"[ \t\r\n]"
#: One word: unquoted characters, escaped ones and quoted strings, with no unquoted space.
_WORD = r"""(?:[^ \t\r\n'"\\]++|\\.|'[^']*+'|"(?:[^"\\]++|\\.)*+")++"""
_WORDS = re.compile(_WORD, re.DOTALL)
#: The text as a whole: words apart, each ended by a space or the end. Its longest match says
#: where a text that is not one fails.
_TEXT = re.compile(rf"{_SPACE}*+(?:{_WORD}(?:{_SPACE}++|\Z))*+", re.DOTALL)
#: The parts of a word with quotes or backslashes: a run outside quotes (escapes and all), or
#: a quoted string.
_PART = re.compile(r"""((?:[^'"\\]++|\\.)++)|'([^']*+)'|"((?:[^"\\]++|\\.)*+)\"""", re.DOTALL)
#: Outside quotes a backslash keeps the next character, whatever it is. (Each is replaced by
#: splitting on it and joining the pieces, which keep the captured character: ``re.sub`` with
#: a template calls back into Python for every match.)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
#: Within double quotes a backslash escapes only a double quote or a backslash.
_QUOTED_ESCAPE = re.compile(r'\\(["\\])')
_SPECIAL = re.compile(r"""['"\\]""")


def split(text: str) -> list[str]:
    """The words of ``text``; ``ValueError`` as ``shlex.split`` raises it for an unclosed quote
    or a backslash with nothing after it."""
    valid = _TEXT.match(text)
    end = valid.end() if valid else 0
    if end < len(text):
        raise ValueError(_why_not(text, end))
    words: list[str] = _WORDS.findall(text)
    if _SPECIAL.search(text) is None:
        return words
    return [_word(word) if _SPECIAL.search(word) else word for word in words]


def _word(word: str) -> str:
    parts = []
    for unquoted, single, double in _PART.findall(word):
        if unquoted:
            parts.append("".join(_ESCAPE.split(unquoted)))
        elif double:
            parts.append("".join(_QUOTED_ESCAPE.split(double)))
        else:
            parts.append(single)
    return "".join(parts)


def _why_not(text: str, end: int) -> str:
    """What ``shlex`` says of a text whose whole words end at ``end``: in the word there, a
    quote left open, or a backslash with nothing after it (at the end, or ending an open
    double quote)."""
    begun = _WORDS.match(text, end)
    stuck = text[begun.end() if begun else end :]
    if stuck.startswith("\\"):
        return "No escaped character"
    if stuck.startswith('"'):
        inner = stuck[1:]
        trailing = len(inner) - len(inner.rstrip("\\"))
        if trailing % 2 == 1 and '"' not in re.sub(r"\\.", "", inner, flags=re.DOTALL):
            return "No escaped character"
    return "No closing quotation"
