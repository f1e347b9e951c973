"""Reading integers out of probe sources, where anything may be garbage: absent means None.

No count, size, id or exit code a machine reports comes near 64 bits, so anything larger is not
a reading but garbage, and is absent. Digit strings are length-checked before ``int()``: past
4300 digits ``int()`` raises, and a 4000-digit number would only break the arithmetic after it
(``float()`` overflows, ``str()`` raises again).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["INT_LIMIT", "MAX_DIGITS", "as_int", "parse_int", "parse_index"]

#: Integers a probe accepts lie strictly between -INT_LIMIT and INT_LIMIT.
INT_LIMIT = 1 << 63
#: The longest digit string read as a number (int64 has 19 digits; leading zeros get some slack).
MAX_DIGITS = 30
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_DIGITS)


def _in_range(value: int) -> int | None:
    return value if -INT_LIMIT < value < INT_LIMIT else None


def parse_int(text: Any) -> int | None:
    """The decimal integer ``text`` holds (whitespace around it allowed), or None: not a string,
    not plain ASCII digits, more than ``MAX_DIGITS`` digits, or outside the int64 range."""
    if not isinstance(text, str) or len(text) > 4 * MAX_DIGITS:  # whitespace around 30 digits, no more
        return None
    value = text.strip()
    if not _INT_TEXT.fullmatch(value):
        return None
    return _in_range(int(value))


def parse_index(text: str, prefix: str) -> int | None:
    """The number in a device name (``renderD128`` with prefix ``renderD`` -> 128), or None when the
    name is not ``prefix`` followed by at most ``MAX_DIGITS`` ASCII digits."""
    rest = text[len(prefix):] if isinstance(text, str) and text.startswith(prefix) else ""
    if not 0 < len(rest) <= MAX_DIGITS or not rest.isascii() or not rest.isdigit():
        return None
    return int(rest)


def as_int(value: Any, *, from_text: bool = False) -> int | None:
    """``value`` as an int, or None: bools, NaN, absurd floats and ints outside int64 are not
    numbers here; with ``from_text`` a string holding an integer (a sysfs or cgroup file) counts too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _in_range(value)
    if isinstance(value, float) and value == value and abs(value) < 1e18:
        return int(value)
    if from_text and isinstance(value, str):
        return parse_int(value)
    return None
