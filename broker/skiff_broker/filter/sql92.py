"""SQL92 property filters with RocketMQ's grammar and semantics, compiled once.

``compile_sql92(text)`` parses a consumer's expression (``a > 5 AND b = 'x'``) into a
``SqlFilter`` whose ``matches(properties)`` decides one message from its properties (user
and system ones alike, ``TAGS`` and ``KEYS`` included), as Apache RocketMQ's broker does:

* Properties are strings. Compared with a number, a property is read as a number of the
  constant's type (``5`` a 32-bit integer, one past 32 bits a 64-bit one, ``5.0`` a
  double), Java's way; compared with ``TRUE``/``FALSE``, it is true when it reads ``true``
  in any case. Two properties compared by ``<`` ``>`` ``<=`` ``>=`` are read as doubles.
* A missing property is NULL; a comparison with NULL is unknown, and AND, OR and NOT follow
  three-valued logic. Only a result of TRUE delivers the message.
* A property that cannot be read as the number it is compared with (``a > 5`` and
  ``a = 'x'``), and any other type mismatch that RocketMQ's evaluator throws on, makes the
  whole expression not match (it is evaluated left to right, AND and OR stop early).
* ``IN`` takes string literals and a property on its left; ``BETWEEN x AND y`` is
  ``>= x AND <= y``; ``CONTAINS``, ``STARTSWITH``, ``ENDSWITH`` (and their ``NOT`` forms)
  are false for a missing property or an empty search.
* Precedence, lowest first: OR, AND, ``=`` ``<>`` ``IS [NOT] NULL``, the other comparisons,
  unary ``+`` ``-`` ``NOT``. (As in JMS selectors, ``NOT a = 1`` reads ``(NOT a) = 1``.)

Where Skiff is stricter: text left over after a whole expression (``a = 1 b``) is an
error, where RocketMQ ignores it; and a float literal of zero is accepted (RocketMQ refuses
``0.0``).

Invariants: ``compile_sql92`` is pure and raises ``SqlSyntaxError`` naming the position of
the error; ``SqlFilter.matches`` is pure, never raises, and reads only the properties the
expression names.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from .sql92_lexer import SqlSyntaxError, Token, tokens

Properties = Mapping[str, str]
Evaluate = Callable[[Properties], Any]

# Bounds on a hostile expression: parentheses and unary operators nested this deep at
# most (each level is several parser calls), and an evaluation this many calls deep
# (a chain of N ANDs is N deep), well inside Python's recursion limit.
MAX_NESTING = 64
MAX_DEPTH = 256

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# What Java's Double.valueOf reads (after trimming), without its hexadecimal form.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)


class JavaLong(int):
    """A 64-bit integer constant (``5L``, or one past 32 bits): a property compared with it
    is read as a Java long, not an int."""

    __slots__ = ()


class _Mismatch(Exception):
    """What RocketMQ's evaluator throws on: the message does not match."""


@dataclasses.dataclass(frozen=True, slots=True)
class SqlFilter:
    expression: str
    _root: Evaluate
    properties: frozenset[str]  # the property names the expression reads

    def matches(self, properties: Properties) -> bool:
        """True if the expression is TRUE for a message with these properties."""
        try:
            return self._root(properties) is True
        except _Mismatch:
            return False


def compile_sql92(expression: str) -> SqlFilter:
    """The filter ``expression`` describes; ``SqlSyntaxError`` if it does not parse."""
    if not expression.strip():
        raise SqlSyntaxError(expression, 0, "the expression is empty; write a condition")
    parser = _Parser(expression, tokens(expression))
    root = parser.parse()
    return SqlFilter(expression, root.evaluate, frozenset(parser.names))


# -- values and comparisons, as RocketMQ's ComparisonExpression decides them ----------------


def _java_integer(text: str, low: int, high: int) -> int:
    if not _JAVA_INTEGER.fullmatch(text):
        raise _Mismatch
    value = int(text)
    if not low <= value <= high:
        raise _Mismatch
    return value


# Java's String.trim: every character up to and including the space.
_JAVA_TRIMMED = "".join(chr(c) for c in range(33))


def _java_double(text: str) -> float:
    trimmed = text.strip(_JAVA_TRIMMED)
    if not _JAVA_DOUBLE.fullmatch(trimmed):
        raise _Mismatch
    return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))


def _read_as(text: str, like: Any) -> Any:
    """A property's text read as the type of the constant ``like``."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, float):
        return _java_double(text)
    if isinstance(like, JavaLong):
        return _java_integer(text, _LONG_MIN, _LONG_MAX)
    return _java_integer(text, _INT_MIN, _INT_MAX)


def _number_order(left: int | float, right: int | float) -> int:
    # Java's Double.compareTo: NaN above everything, equal to itself.
    left_nan = isinstance(left, float) and math.isnan(left)
    right_nan = isinstance(right, float) and math.isnan(right)
    if left_nan or right_nan:
        return int(left_nan) - int(right_nan)
    return (left > right) - (left < right)


def _order(left: Any, right: Any) -> int:
    """The sign of comparing two non-NULL values, converting strings as RocketMQ does."""
    left_type, right_type = type(left), type(right)
    if left_type is not right_type:
        if left_type is bool:
            if right_type is str:
                raise _Mismatch  # RocketMQ's evaluator fails on this pairing
            return -1
        if left_type is str:
            if right_type is bool or right_type in (int, float, JavaLong):
                left = _read_as(left, right)
            else:
                return -1
        elif right_type is str:
            right = _read_as(right, left)
        elif right_type is bool:
            return -1
        return _number_order(left, right) if not isinstance(left, bool) else _bools(left, right)
    if left_type is bool:
        return _bools(left, right)
    if left_type is str:
        return (left > right) - (left < right)
    return _number_order(left, right)


def _bools(left: bool, right: bool) -> int:
    return int(left) - int(right)


def _equal(left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        if left is None and right is None:
            return True
        return None if left is None else False
    if type(left) is type(right) and left == right:
        return True
    return _order(left, right) == 0


def _ordered(left: Any, right: Any, wanted: Callable[[int], bool]) -> bool | None:
    if left is None or right is None:
        return None
    if type(left) is str and type(right) is str:
        return wanted(_number_order(_java_double(left), _java_double(right)))
    return wanted(_order(left, right))


# -- the parse tree: each node knows what RocketMQ's parser checks of it --------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Node:
    evaluate: Evaluate
    boolean: bool = False  # a BooleanExpression (conditions, TRUE, FALSE, NULL)
    constant: bool = False
    value: Any = None  # a constant's value, or a negated number's
    property: str | None = None  # a property's name
    depth: int = 1  # calls deep its evaluation goes


def _known_number(node: _Node) -> bool:
    """A number known when the expression is compiled: a literal, or one negated."""
    return type(node.value) in (int, float, JavaLong)


def _constant(value: Any, *, boolean: bool = False) -> _Node:
    return _Node(lambda _p: value, boolean=boolean, constant=True, value=value)


_TRUE = _constant(True, boolean=True)
_FALSE = _constant(False, boolean=True)
_NULL = _constant(None, boolean=True)


def _condition(evaluate: Evaluate, *operands: _Node) -> _Node:
    depth = 1 + max((operand.depth for operand in operands), default=0)
    return _Node(evaluate, boolean=True, depth=depth)


class _Parser:
    """Recursive descent over RocketMQ's SelectorParser grammar."""

    def __init__(self, expression: str, found: list[Token]) -> None:
        self._text = expression
        self._tokens = found
        self._at = 0
        self._nesting = 0
        self.names: set[str] = set()

    # -- tokens ---------------------------------------------------------------

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._at + ahead, len(self._tokens) - 1)]

    def _take(self) -> Token:
        token = self._tokens[self._at]
        self._at = min(self._at + 1, len(self._tokens) - 1)
        return token

    def _expect(self, kind: str, what: str) -> Token:
        token = self._peek()
        if token.kind != kind:
            self._fail(token, f"expected {what}, found {_describe(token)}")
        return self._take()

    def _fail(self, token: Token, problem: str) -> None:
        raise SqlSyntaxError(self._text, token.position, problem)

    # -- grammar --------------------------------------------------------------

    def parse(self) -> _Node:
        start = self._peek()
        node = self._or()
        end = self._peek()
        if end.kind != "END":
            self._fail(end, f"unexpected {_describe(end)} after a whole expression")
        root = self._as_condition(node, start)
        if root.depth > MAX_DEPTH:
            self._fail(
                start,
                f"the expression is {root.depth} conditions deep, more than {MAX_DEPTH}; "
                "use IN (...) for a long list of alternatives, or split the filter",
            )
        return root

    def _enter(self, token: Token) -> None:
        self._nesting += 1
        if self._nesting > MAX_NESTING:
            self._fail(token, f"nested more than {MAX_NESTING} deep; write it flatter")

    def _as_condition(self, node: _Node, where: Token) -> _Node:
        if node.boolean:
            return node
        if node.property is not None:
            operand = node.evaluate

            def boolean_cast(p: Properties) -> bool | None:
                value = operand(p)
                if value is None:
                    return None
                return value if type(value) is bool else False

            return _condition(boolean_cast, node)
        self._fail(where, "this part is not a condition (compare it, e.g. a = 1)")
        raise AssertionError  # unreachable

    def _or(self) -> _Node:
        start = self._peek()
        left = self._and()
        while self._peek().kind == "OR":
            self._take()
            right_start = self._peek()
            right = self._as_condition(self._and(), right_start)
            left = _either(self._as_condition(left, start), right)
        return left

    def _and(self) -> _Node:
        start = self._peek()
        left = self._equality()
        while self._peek().kind == "AND":
            self._take()
            right_start = self._peek()
            right = self._as_condition(self._equality(), right_start)
            left = _both(self._as_condition(left, start), right)
        return left

    def _equality(self) -> _Node:
        left = self._comparison()
        while True:
            token = self._peek()
            if token.kind in ("=", "<>"):
                self._take()
                right = self._comparison()
                equal = self._equal(left, right, token)
                left = equal if token.kind == "=" else _negation(equal)
            elif token.kind == "IS" and self._peek(1).kind == "NULL":
                self._take()
                self._take()
                left = _is_null(left)
            elif token.kind == "IS" and self._peek(1).kind == "NOT":
                self._take()
                self._take()
                self._expect("NULL", "NULL after IS NOT")
                left = _negation(_is_null(left))
            else:
                return left

    def _equal(self, left: _Node, right: _Node, where: Token) -> _Node:
        for operand in (left, right):
            if operand.constant and operand.value is None:
                self._fail(where, "NULL cannot be compared with '='; use IS NULL or IS NOT NULL")
        if left.constant and right.constant and left.boolean and not right.boolean:
            self._fail(where, f"{left.value} cannot be compared with {right.value!r}")
        lhs, rhs = left.evaluate, right.evaluate

        def equal(p: Properties) -> bool | None:
            return _equal(lhs(p), rhs(p))

        return _condition(equal, left, right)

    def _comparison(self) -> _Node:
        left = self._unary()
        while True:
            token = self._peek()
            kind = token.kind
            negated = kind == "NOT" and self._peek(1).kind in (
                "CONTAINS",
                "STARTSWITH",
                "ENDSWITH",
                "BETWEEN",
                "IN",
            )
            if negated:
                self._take()
                kind = self._peek().kind
            if kind in (">", ">=", "<", "<="):
                self._take()
                left = self._ordered(left, self._unary(), kind, token)
            elif kind in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
                self._take()
                search = self._expect("STRING", f"a string in quotes after {kind}").text
                left = _text_test(left, kind, search, negated)
            elif kind == "BETWEEN":
                self._take()
                low = self._unary()
                self._expect("AND", "AND between the two bounds of BETWEEN")
                high = self._unary()
                left = self._between(left, low, high, negated, token)
            elif kind == "IN":
                self._take()
                left = self._in(left, negated, token)
            else:
                return left

    def _check_ordered_operand(self, node: _Node, where: Token) -> None:
        if node.constant and (not isinstance(node.value, int | float) or node.boolean):
            self._fail(where, f"{_show(node.value)} cannot be compared by <, >, <= or >=")
        if node.boolean:
            self._fail(where, "a condition cannot be compared by <, >, <= or >=")

    def _ordered(self, left: _Node, right: _Node, operator: str, where: Token) -> _Node:
        self._check_ordered_operand(left, where)
        self._check_ordered_operand(right, where)
        wanted = _ORDER_TESTS[operator]
        # A negated literal is no constant to RocketMQ's checks, but its value is known.
        if left.property is not None and _known_number(right):
            return _condition(_property_against_number(left.property, right.value, wanted), left)
        lhs, rhs = left.evaluate, right.evaluate

        def ordered(p: Properties) -> bool | None:
            return _ordered(lhs(p), rhs(p), wanted)

        return _condition(ordered, left, right)

    def _between(self, value: _Node, low: _Node, high: _Node, negated: bool, where: Token) -> _Node:
        if negated:
            return _either(
                self._ordered(value, low, "<", where), self._ordered(value, high, ">", where)
            )
        if low.constant and high.constant:
            if low.value is None or high.value is None:
                self._fail(where, "the bounds of BETWEEN cannot be NULL")
            try:
                backwards = _order(high.value, low.value) < 0
            except _Mismatch:
                backwards = False
            if backwards:
                self._fail(
                    where,
                    f"the lower bound of BETWEEN ({_show(low.value)}) must not be greater than "
                    f"the upper one ({_show(high.value)})",
                )
        return _both(
            self._ordered(value, low, ">=", where), self._ordered(value, high, "<=", where)
        )

    def _in(self, left: _Node, negated: bool, where: Token) -> _Node:
        if left.property is None:
            self._fail(where, "IN needs a property name on its left")
        self._expect("(", "( after IN")
        members = [self._expect("STRING", "a string in quotes in the IN list").text]
        while self._peek().kind == ",":
            self._take()
            members.append(self._expect("STRING", "a string in quotes in the IN list").text)
        self._expect(")", ") to end the IN list")
        return _membership(left, frozenset(members), negated)

    def _unary(self) -> _Node:
        token = self._peek()
        if token.kind not in ("+", "-", "NOT"):
            return self._primary()
        self._take()
        self._enter(token)
        operand_start = self._peek()
        operand = self._unary()
        self._nesting -= 1
        if token.kind == "+":
            return operand
        if token.kind == "-":
            return _negate(operand)
        return _negation(self._as_condition(operand, operand_start))

    def _primary(self) -> _Node:
        token = self._take()
        kind = token.kind
        if kind == "STRING":
            return _constant(token.text)
        if kind == "INT":
            return _constant(self._integer(token))
        if kind == "FLOAT":
            value = float(token.text)
            if math.isinf(value):
                self._fail(token, f"{token.text} is larger than a double can hold")
            return _constant(value)
        if kind == "TRUE":
            return _TRUE
        if kind == "FALSE":
            return _FALSE
        if kind == "NULL":
            return _NULL
        if kind == "ID":
            name = token.text
            self.names.add(name)
            return _Node(lambda p: p.get(name), property=name)
        if kind == "(":
            self._enter(token)
            node = self._or()
            self._expect(")", "a closing )")
            self._nesting -= 1
            return node
        self._fail(token, f"expected a property, a literal or (, found {_describe(token)}")
        raise AssertionError  # unreachable

    def _integer(self, token: Token) -> int:
        # As RocketMQ: a 32-bit int if it fits (an L suffix changes nothing), else a long.
        value = int(token.text.rstrip("lL"))
        if value > _LONG_MAX:
            self._fail(token, f"{token.text} is larger than a 64-bit integer")
        return JavaLong(value) if value > _INT_MAX else value


def _property_against_number(name: str, number: Any, wanted: Callable[[int], bool]) -> Evaluate:
    """``name <op> number``, the usual form, without the general conversions."""
    if type(number) is float:
        read: Callable[[str], Any] = _java_double
    elif type(number) is JavaLong:

        def read(text: str) -> int:
            return _java_integer(text, _LONG_MIN, _LONG_MAX)
    else:

        def read(text: str) -> int:
            return _java_integer(text, _INT_MIN, _INT_MAX)

    def ordered(p: Properties) -> bool | None:
        text = p.get(name)
        if text is None:
            return None
        return wanted(_number_order(read(text), number))

    return ordered


_ORDER_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda order: order > 0,
    ">=": lambda order: order >= 0,
    "<": lambda order: order < 0,
    "<=": lambda order: order <= 0,
}


def _negate(node: _Node) -> _Node:
    """Unary minus: a number's negation; NULL for anything else (strings, conditions)."""
    if _known_number(node):
        value = node.value
        negated = JavaLong(-value) if type(value) is JavaLong else -value
        # -2147483648 is a 64-bit literal negated, as in Java; it stays a long.
        return _Node(lambda _p: negated, constant=False, value=negated)
    operand = node.evaluate

    def negate(p: Properties) -> Any:
        value = operand(p)
        if type(value) in (int, float, JavaLong):
            return -value
        return None

    return _Node(negate, depth=node.depth + 1)


def _negation(node: _Node) -> _Node:
    operand = node.evaluate

    def negation(p: Properties) -> bool | None:
        value = operand(p)
        return None if value is None else not value

    return _condition(negation, node)


def _is_null(node: _Node) -> _Node:
    operand = node.evaluate
    return _condition(lambda p: operand(p) is None, node)


def _logic(left: _Node, right: _Node, decisive: bool) -> _Node:
    """AND (``decisive`` False) or OR (True) in three-valued logic, left side first."""
    lhs, rhs = left.evaluate, right.evaluate

    def logic(p: Properties) -> bool | None:
        first = lhs(p)
        if first is decisive:
            return decisive
        second = rhs(p)
        if second is decisive:
            return decisive
        if first is None or second is None:
            return None
        return not decisive

    return _condition(logic, left, right)


def _both(left: _Node, right: _Node) -> _Node:
    return _logic(left, right, False)


def _either(left: _Node, right: _Node) -> _Node:
    return _logic(left, right, True)


def _membership(node: _Node, members: frozenset[str], negated: bool) -> _Node:
    operand = node.evaluate

    def membership(p: Properties) -> bool | None:
        value = operand(p)
        if type(value) is not str:
            return None
        return (value in members) != negated

    return _condition(membership, node)


_TEXT_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda value, search: search in value,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def _text_test(node: _Node, kind: str, search: str, negated: bool) -> _Node:
    operand = node.evaluate
    test = _TEXT_TESTS[kind]

    def text_test(p: Properties) -> bool:
        if not search:
            return False
        value = operand(p)
        if type(value) is not str:
            return False
        return test(value, search) != negated

    return _condition(text_test, node)


def _describe(token: Token) -> str:
    if token.kind == "END":
        return "the end of the expression"
    if token.kind == "STRING":
        return f"the string '{token.text}'"
    return f"{token.text!r}"


def _show(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value)
