"""SQL92 filters decide as Apache RocketMQ's broker does, for each rule of its evaluator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiff_broker.filter.sql92 import MAX_DEPTH, MAX_NESTING, SqlFilter, compile_sql92
from skiff_broker.filter.sql92_lexer import SqlSyntaxError


def matches(expression: str, **properties: str) -> bool:
    return compile_sql92(expression).matches(properties)


@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    [
        # Numbers: a property is read as the constant's type.
        ("a > 5", {"a": "6"}, True),
        ("a > 5", {"a": "5"}, False),
        ("a >= 5 AND a <= 5", {"a": "5"}, True),
        ("a < -3", {"a": "-4"}, True),
        ("a > -5", {"a": "-4"}, True),
        ("a > -5", {"a": "-4.5"}, False),  # read as a 32-bit int, as the literal is
        ("a > -5.0", {"a": "-4.5"}, True),
        ("a >= - -5", {"a": "5"}, True),
        ("a BETWEEN -1 AND -5", {"a": "-3"}, False),  # no bounds check on negations
        ("a = 5", {"a": "5"}, True),
        ("a = 5", {"a": "+5"}, True),
        ("a <> 5", {"a": "6"}, True),
        # Read as a 32-bit int: a decimal or a value past 32 bits does not match at all.
        ("a > 5", {"a": "5.5"}, False),
        ("a < 5", {"a": "5.5"}, False),
        ("a > 5", {"a": "3000000000"}, False),
        ("a > 2147483648", {"a": "3000000000"}, True),  # a 64-bit constant reads a long
        ("a > 5.0", {"a": "5.5"}, True),  # a double constant reads a double
        ("a > 5.0", {"a": " 5.5 "}, True),  # as Java's Double.valueOf, around spaces
        ("a = 5.0", {"a": "5"}, True),
        ("a > .5E1", {"a": "6"}, True),
        ("a = 5L", {"a": "5"}, True),
        # Strings.
        ("b = 'x'", {"b": "x"}, True),
        ("b = 'x'", {"b": "X"}, False),
        ("b <> 'x'", {"b": "y"}, True),
        ("b = 'it''s'", {"b": "it's"}, True),
        ("b IN ('x', 'y')", {"b": "y"}, True),
        ("b IN ('x', 'y')", {"b": "z"}, False),
        ("b NOT IN ('x', 'y')", {"b": "z"}, True),
        ("b CONTAINS 'ell'", {"b": "hello"}, True),
        ("b NOT CONTAINS 'ell'", {"b": "hello"}, False),
        ("b STARTSWITH 'he'", {"b": "hello"}, True),
        ("b ENDSWITH 'lo'", {"b": "hello"}, True),
        ("b NOT ENDSWITH 'lo'", {"b": "help"}, True),
        ("b CONTAINS ''", {"b": "hello"}, False),
        # Two properties ordered are read as doubles.
        ("a > b", {"a": "10", "b": "9.5"}, True),
        ("a > b", {"a": "x", "b": "9.5"}, False),
        ("a = b", {"a": "x", "b": "x"}, True),
        # Booleans: a property equals TRUE when it reads true in any case.
        ("flag = TRUE", {"flag": "true"}, True),
        ("flag = TRUE", {"flag": "TRUE"}, True),
        ("flag = TRUE", {"flag": "yes"}, False),
        ("flag = FALSE", {"flag": "yes"}, True),
        ("TRUE", {}, True),
        ("FALSE OR TRUE", {}, True),
        ("flag", {"flag": "true"}, False),  # a bare property is never a boolean
        # BETWEEN.
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a BETWEEN 1 AND 3", {"a": "4"}, False),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
        # The message's system properties are properties too.
        ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
        ("TAGS IN ('TagA', 'TagB') AND KEYS = 'k1'", {"TAGS": "TagB", "KEYS": "k1"}, True),
        # Keywords in any case; names keep theirs.
        ("a > 5 and b = 'x'", {"a": "6", "b": "x"}, True),
        ("A > 5", {"a": "6"}, False),
        ("$x_1 = 'v'", {"$x_1": "v"}, True),
        # Comments.
        ("a = 1 /* one */ OR a = 2", {"a": "2"}, True),
        ("a = 1 -- the first\nOR a = 2", {"a": "2"}, True),
        # Precedence: AND before OR, parentheses.
        ("a = 1 OR a = 2 AND b = 'x'", {"a": "1"}, True),
        ("(a = 1 OR a = 2) AND b = 'x'", {"a": "1"}, False),
        # JMS precedence: NOT binds to the next operand, so this is (NOT a) = 1.
        ("NOT a = 1", {"a": "2"}, False),
        ("NOT (a = 1)", {"a": "2"}, True),
    ],
)
def test_decides_as_rocketmq(expression, properties, expected):
    assert compile_sql92(expression).matches(properties) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # A missing property is NULL: unknown, never TRUE, and NOT of unknown is unknown.
        ("a > 5", False),
        ("NOT (a > 5)", False),
        ("a = 'x'", False),
        ("a <> 'x'", False),
        ("a IN ('x')", False),
        ("a NOT IN ('x')", False),
        ("a IS NULL", True),
        ("a IS NOT NULL", False),
        ("a NOT CONTAINS 'x'", False),
        # Three-valued logic: unknown OR TRUE is TRUE, unknown AND FALSE is FALSE.
        ("a > 5 OR TRUE", True),
        ("NOT (a > 5 AND FALSE)", True),
        ("NOT (a > 5 OR FALSE)", False),
        ("a = b", True),  # both missing: equal, as RocketMQ's evaluator answers
    ],
)
def test_missing_properties_are_null(expression, expected):
    assert compile_sql92(expression).matches({}) is expected


def test_a_type_mismatch_anywhere_makes_the_whole_expression_not_match():
    # RocketMQ's evaluator throws on 'x' read as a number, and the message is not delivered,
    # even where the other side of an OR would be TRUE.
    assert not matches("a = 5 OR b = 'x'", a="x", b="x")
    # Evaluated left to right: a TRUE left side of OR never reaches the mismatch.
    assert matches("b = 'x' OR a = 5", a="x", b="x")
    assert not matches("a = 5 AND b = 'x'", a="5", b="y")
    assert not matches("TRUE = flag", flag="true")


@pytest.mark.parametrize(
    ("expression", "position", "words"),
    [
        ("a >", 3, "expected a property"),
        ("a > 'x'", 2, "cannot be compared"),
        ("a > TRUE", 2, "cannot be compared"),
        ("a = NULL", 2, "IS NULL"),
        ("a = 1 b", 6, "after a whole expression"),
        ("a = 'open", 4, "not closed"),
        ("a = 1 /* open", 6, "comment is not closed"),
        ("a # 1", 2, "unexpected character"),
        ("5", 0, "not a condition"),
        ("a = 1 AND 'x'", 10, "not a condition"),
        ("a BETWEEN 3 AND 1", 2, "must not be greater"),
        ("'x' IN ('x')", 4, "IN needs a property"),
        ("a IN (1, 2)", 6, "a string in quotes"),
        ("a IN ()", 6, "a string in quotes"),
        ("a IS NOT 5", 9, "NULL after IS NOT"),
        ("(a = 1", 6, r"a closing \)"),
        ("a > 99999999999999999999", 4, "larger than a 64-bit integer"),
        ("", 0, "empty"),
        ("a > 5 -- no line break", 6, "must end with a line break"),
    ],
)
def test_an_expression_that_does_not_parse_is_refused_with_its_position(
    expression, position, words
):
    with pytest.raises(SqlSyntaxError, match=words) as raised:
        compile_sql92(expression)
    assert raised.value.position == position
    assert f"position {position + 1}" in str(raised.value)


def test_a_filter_names_the_properties_it_reads():
    assert compile_sql92("a > 5 AND (b = 'x' OR TAGS IN ('t'))").properties == {"a", "b", "TAGS"}


_NAMES = st.sampled_from(["a", "b", "c"])
_VALUES = st.one_of(
    st.integers(-10, 10).map(str),
    st.floats(-10, 10, allow_nan=False).map(repr),
    st.sampled_from(["x", "y", "true", "", " 3 "]),
)


@st.composite
def _expressions(draw, depth=0):
    if depth >= 3 or draw(st.booleans()):
        name = draw(_NAMES)
        form = draw(st.integers(0, 5))
        number = draw(st.integers(-5, 5))
        return [
            f"{name} > {number}",
            f"{name} = '{draw(st.sampled_from(['x', 'y', '3']))}'",
            f"{name} IS NULL",
            f"{name} BETWEEN {number} AND {number + 3}",
            f"{name} IN ('x', '3')",
            f"{name} <= {number}.5",
        ][form]
    left = draw(_expressions(depth=depth + 1))
    right = draw(_expressions(depth=depth + 1))
    joined = draw(st.sampled_from(["AND", "OR"]))
    prefix = "NOT " if draw(st.booleans()) else ""
    return f"{prefix}({left} {joined} {right})"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_expressions(), st.dictionaries(_NAMES, _VALUES))
def test_matching_is_pure_and_never_raises(expression, properties):
    compiled = compile_sql92(expression)
    assert isinstance(compiled, SqlFilter)
    before = dict(properties)
    first = compiled.matches(properties)
    assert compiled.matches(properties) is first
    assert properties == before
    # Compiling again gives a filter that decides the same.
    assert compile_sql92(expression).matches(properties) is first


def test_expressions_nested_or_chained_within_the_bounds_are_served():
    nested = "(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING
    assert compile_sql92(nested).matches({"a": "1"})
    chained = " AND ".join(["a = 1"] * (MAX_DEPTH - 1))
    assert compile_sql92(chained).matches({"a": "1"})


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("(" * (MAX_NESTING + 1) + "a = 1" + ")" * (MAX_NESTING + 1), "nested more than"),
        ("NOT " * (MAX_NESTING + 1) + "a = 1", "nested more than"),
        ("a > " + "- " * (MAX_NESTING + 1) + "5", "nested more than"),
        (" AND ".join(["a = 1"] * (MAX_DEPTH + 1)), "conditions deep"),
        (" OR ".join(["a = 1"] * 5000), "IN \\(...\\)"),
    ],
)
def test_a_hostile_depth_is_refused_as_a_syntax_error_not_a_crash(expression, words):
    # Without the bounds these reach Python's recursion limit, parsing or matching.
    with pytest.raises(SqlSyntaxError, match=words):
        compile_sql92(expression)
