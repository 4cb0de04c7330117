"""Strict JSON text: RFC 8259 and nothing more, every fault at its line and column.

Python's :mod:`json` reads ``NaN`` and ``Infinity``, keeps the last of two equal
keys, turns ``1e400`` into ``inf`` and raises ``RecursionError`` on deep
nesting. :func:`loads` refuses all of these with a line ``line L, column C:
what was written``; a number too large for a double is kept as an
:class:`OverflowNumber` so that validation can name its field. The fast C
parser reads every file; the text is scanned again only to locate a fault.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: deepest nesting of arrays and objects accepted (an instance is 5 levels deep)
MAX_NESTING = 100
#: characters of a user's text an error line quotes at most
QUOTE_CHARS = 80

_CONSTANTS = ("NaN", "Infinity", "-Infinity")
#: more digits than this and an integer cannot fit a double (max ~1.8e308)
_MAX_FLOAT_DIGITS = 309
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?Infinity|NaN|[-0-9][-+.eE0-9]*|[\[\]{}]', re.S)
_SPACE = re.compile(r"[ \t\n\r]*")


class JSONTextError(ValueError):
    """Text that is not strict JSON; ``problems`` has one line each, ``line L, column C: ...``."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class OverflowNumber(float):
    """A JSON number too large for an IEEE double, kept as written.

    Its float value is ``inf`` or ``-inf`` so that any finiteness check refuses
    it; ``str`` gives back what the user wrote (shortened), and ``where`` says
    at which line and column when the number came from a text.
    """

    __slots__ = ("text", "where")

    def __new__(cls, text: str, where: str = "") -> OverflowNumber:
        self = super().__new__(cls, -math.inf if text.startswith("-") else math.inf)
        self.text = text
        self.where = where
        return self

    def __str__(self) -> str:
        return shorten(self.text)

    __repr__ = __str__

    def describe(self) -> str:
        """``1e400 overflows a double`` with the place it was read from, if known."""
        at = f" ({self.where})" if self.where else ""
        return f"{self} overflows a double{at}"


def shorten(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 24]}... ({len(text)} characters)"


def quote(value: str, limit: int = QUOTE_CHARS) -> str:
    """A string as an error line shows it: quoted, escaped, at most about ``limit`` characters.

    ``repr`` escapes every character that is not printable (controls, line
    separators, unpaired surrogates), so the result is one safe line.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 24]}... ({len(value)} characters)"


def _overflows(literal: str) -> bool:
    """Whether a JSON number literal lies outside the range of a double."""
    try:
        if any(c in literal for c in ".eE"):
            return math.isinf(float(literal))
        if len(literal) - literal.startswith("-") > _MAX_FLOAT_DIGITS:
            return True
        float(int(literal))
    except OverflowError:
        return True
    except ValueError:  # not a number literal after all
        return False
    return False


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - text.rfind(chr(10), 0, pos)}"


def _found(text: str, pos: int) -> str:
    if pos >= len(text):
        return "the end of the text"
    return repr(text[pos:pos + 20].partition("\n")[0] or "\n")


class _Hooks:
    """Callbacks for :func:`json.loads` that note every fault instead of trusting it."""

    def __init__(self) -> None:
        self.constants = 0
        self.duplicates = 0
        self.overflows: list[OverflowNumber] = []

    def constant(self, token: str) -> None:
        self.constants += 1

    def pairs(self, pairs: list[tuple[str, Any]]) -> dict:
        out = dict(pairs)
        if len(out) != len(pairs):
            self.duplicates += 1
        return out

    def number(self, literal: str) -> float | int:
        if _overflows(literal):
            self.overflows.append(OverflowNumber(literal))
            return self.overflows[-1]
        return int(literal) if literal.lstrip("-").isdigit() else float(literal)


def _scan(text: str, hooks: _Hooks, first_only: bool = False) -> list[tuple[int, str]]:
    """Locate the faults ``hooks`` noted in a text the parser read; (position, line) pairs.

    Gives each :class:`OverflowNumber` its ``where`` and returns one line per
    constant, duplicate key and nesting past :data:`MAX_NESTING` (only the
    first fault with ``first_only``).
    """
    faults: list[tuple[int, str]] = []
    overflows = iter(hooks.overflows)
    stack: list[set | None] = []
    too_deep = False
    for m in _TOKEN.finditer(text):
        if first_only and faults:
            break
        tok, pos = m.group(), m.start()
        if tok in "[{":
            stack.append(set() if tok == "{" else None)
            if len(stack) > MAX_NESTING and not too_deep:
                too_deep = True
                faults.append((pos, f"nested too deeply: more than {MAX_NESTING} levels of "
                                    "arrays and objects"))
        elif tok in "]}":
            if stack:
                stack.pop()
        elif tok in _CONSTANTS:
            faults.append((pos, f"{tok} is not a number JSON allows"))
        elif tok[0] == '"':
            keys = stack[-1] if stack else None
            after = _SPACE.match(text, m.end()).end()
            if keys is not None and text.startswith(":", after):
                key = json.loads(tok)
                if key in keys:
                    faults.append((pos, f"key {quote(key)} appears twice in one object"))
                keys.add(key)
        elif _overflows(tok):
            number = next(overflows, None)
            if number is not None:
                number.where = _where(text, pos)
    return faults


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests arrays and objects more than ``limit`` deep (no recursion)."""
    todo = [(value, 1)] if isinstance(value, (dict, list)) else []
    while todo:
        node, depth = todo.pop()
        if depth > limit:
            return True
        todo.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node)
                    if isinstance(v, (dict, list)))
    return False


def loads(text: str) -> Any:
    """Parse strict JSON text.

    Parameters
    ----------
    text : str
        The JSON text; a leading UTF-8 byte order mark (U+FEFF) is skipped.

    Returns
    -------
    object
        The value: dicts, lists, str, int, float, bool, None. A number too
        large for a double is an :class:`OverflowNumber` (a non-finite float).

    Raises
    ------
    JSONTextError
        Bad syntax, ``NaN``/``Infinity`` tokens, a key repeated in one object,
        or nesting deeper than :data:`MAX_NESTING`; each line says
        ``line L, column C: ...`` and quotes at most ~80 characters.

    Examples
    --------
    >>> loads('{"a": [1, 2.5]}')
    {'a': [1, 2.5]}
    >>> loads('{"a": NaN}')
    Traceback (most recent call last):
    ...
    chainpipe.strict_json.JSONTextError: line 1, column 7: NaN is not a number JSON allows
    """
    text = text.removeprefix("\ufeff")
    hooks = _Hooks()
    try:
        value = json.loads(text, parse_constant=hooks.constant, object_pairs_hook=hooks.pairs,
                           parse_float=hooks.number, parse_int=hooks.number)
    except json.JSONDecodeError as exc:
        msg = "extra text after the JSON value" if exc.msg == "Extra data" else \
            exc.msg[:1].lower() + exc.msg[1:].removesuffix(" starting at").removesuffix(" at")
        raise JSONTextError(
            [f"{_where(text, exc.pos)}: {msg}, found {_found(text, exc.pos)}"]) from None
    except RecursionError:
        # deeper than the parser can follow: the scan finds where it passes MAX_NESTING
        faults = _scan(text, _Hooks(), first_only=True)
        raise JSONTextError([f"{_where(text, pos)}: {line}" for pos, line in faults[:1]]
                            or ["nested too deeply"]) from None
    if hooks.constants or hooks.duplicates or hooks.overflows \
            or _deeper_than(value, MAX_NESTING):
        faults = _scan(text, hooks)
        if faults:
            raise JSONTextError([f"{_where(text, pos)}: {line}" for pos, line in sorted(faults)])
    return value


def decode(data: bytes) -> Any:
    """Parse strict JSON from UTF-8 bytes (with or without a byte order mark).

    Parameters
    ----------
    data : bytes
        The file's content.

    Returns
    -------
    object
        As :func:`loads`.

    Raises
    ------
    JSONTextError
        Bytes that are not UTF-8 (the line and column of the first bad byte),
        or any fault :func:`loads` refuses.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[start:exc.start].decode("utf-8", "replace")) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise JSONTextError([f"line {line}, column {column}: byte 0x{data[exc.start]:02x} is "
                             "not UTF-8 (JSON text is UTF-8)"]) from None
    return loads(text)
