"""Reading integers out of probe sources, where anything may be garbage: absent means None."""

from __future__ import annotations

from typing import Any


def as_int(value: Any, *, from_text: bool = False) -> int | None:
    """``value`` as an int, or None: bools, NaN and absurd floats are not numbers here;
    with ``from_text`` a string holding an integer (a sysfs or cgroup file) counts too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 1e18:
        return int(value)
    if from_text and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None
