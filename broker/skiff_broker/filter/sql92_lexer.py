"""The tokens of RocketMQ's SQL92 filter language, each with its position in the text.

Keywords and identifiers are case-insensitive as keywords (``and``, ``AND``), and an
identifier keeps its spelling as the property name it names. Literals: integers (``0`` or
no leading zero, an optional ``L``), decimals (``5.5``, ``5.``, ``.5``, exponents),
strings in single quotes with ``''`` for a quote. ``-- line`` and ``/* block */`` comments
are skipped.

Invariant: ``tokens`` is pure; it raises ``SqlSyntaxError`` naming the position (1-based
character) of the first character it cannot read, and always ends with an ``END`` token.
"""

from __future__ import annotations

import dataclasses
import re


class SqlSyntaxError(ValueError):
    """An expression that does not parse; the message names the position and what to do."""

    def __init__(self, expression: str, position: int, problem: str) -> None:
        self.position = position  # 0-based index into the expression
        super().__init__(
            f"SQL92 filter {expression!r} is invalid at position {position + 1}: {problem}"
        )


KEYWORDS = frozenset(
    {
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Token:
    kind: str  # a keyword, an operator, "ID", "INT", "FLOAT", "STRING" or "END"
    text: str  # the name, the literal's value (a string's unquoted), or the operator
    position: int


_SCANNER = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+)
  | (?P<line_comment>--[^\n\r]*(?:\r\n|\n|\r))
  | (?P<block_comment>/\*.*?\*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokens(expression: str) -> list[Token]:
    """Every token of ``expression``, then ``END``."""
    found: list[Token] = []
    position = 0
    while position < len(expression):
        match = _SCANNER.match(expression, position)
        if match is None or (match.lastgroup == "op" and expression.startswith("--", position)):
            raise SqlSyntaxError(expression, position, _unreadable(expression, position))
        kind = match.lastgroup
        text = match.group()
        if kind == "float":
            found.append(Token("FLOAT", text, position))
        elif kind == "int":
            found.append(Token("INT", text, position))
        elif kind == "string":
            found.append(Token("STRING", text[1:-1].replace("''", "'"), position))
        elif kind == "id":
            upper = text.upper()
            found.append(Token(upper if upper in KEYWORDS else "ID", text, position))
        elif kind == "op":
            found.append(Token(text, text, position))
        position = match.end()
    found.append(Token("END", "", len(expression)))
    return found


def _unreadable(expression: str, position: int) -> str:
    char = expression[position]
    if char == "'":
        return "a string is not closed; end it with ' (write '' for a quote inside it)"
    if expression.startswith("/*", position):
        return "a comment is not closed; end it with */"
    if expression.startswith("--", position):
        return "a -- comment must end with a line break"
    return (
        f"unexpected character {char!r}; property names are letters, digits, '_' and '$', "
        "strings are in single quotes"
    )
