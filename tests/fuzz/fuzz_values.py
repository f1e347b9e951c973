"""Hostile values the fuzz surfaces draw from: what an adversarial user, a broken machine or a
hand-edited file can hand the fabric. Shared by ``surfaces_pure.py`` and ``surfaces_probes.py``
(and free for ``surfaces_registry.py``)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "Hostile", "HUGE_INTS", "digit_strings", "nasty_floats", "big_text", "big_list", "scalars",
    "values", "json_values", "deep_list", "deep_dict", "cyclic", "mutate", "mutations", "lines_of",
]


class Hostile:
    """An object every protocol of which raises: comparison, hashing, iteration, truth, numbers,
    even ``repr``. Code that type-checks before touching a value refuses it cleanly."""

    def _boom(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hostile object touched")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _boom
    __hash__ = __iter__ = __len__ = __bool__ = __float__ = __int__ = __index__ = _boom  # type: ignore[assignment]
    __str__ = __repr__ = __format__ = __contains__ = __getitem__ = _boom  # type: ignore[assignment]


#: Integers no machine has: past float range, past int64, past Python's 4300-digit str() limit.
#: (Built by a map: hypothesis itself cannot repr a strategy holding a 4400-digit literal.)
HUGE_INTS = st.sampled_from([(10, 400, 0), (-10, 401, 0), (2, 63, 0), (2, 64, 0), (-2, 63, -1), (10, 18, 0), (10, 4400, 0),
                             (2, 1024, 0)]).map(lambda t: t[0] ** t[1] + t[2])


def digit_strings(min_digits: int = 19, max_digits: int = 6000) -> st.SearchStrategy[str]:
    """Decimal digit strings from past int64 to past the int() conversion limit."""
    return st.integers(min_digits, max_digits).map(lambda n: "9" * n)


nasty_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 5e-324, -0.0, 1e300 * 10]),
)


def big_text(min_size: int = 1000, max_size: int = 200_000) -> st.SearchStrategy[str]:
    """A long string, built (not drawn character by character: that would be slow)."""
    return st.tuples(st.integers(min_size, max_size), st.sampled_from(["x", "é", "9", " ", "\n", "\x00", "🙂"])).map(
        lambda t: t[1] * t[0])


def big_list(min_size: int = 1000, max_size: int = 100_000) -> st.SearchStrategy[list[str]]:
    return st.integers(min_size, max_size).map(lambda n: [f"t{i}" for i in range(n)])


def deep_list(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def deep_dict(depth: int, key: str = "a") -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {key: out}
    return out


def cyclic(kind: str) -> Any:
    """A container that contains itself."""
    if kind == "list":
        loop: list = []
        loop.append(loop)
        return loop
    d: dict = {}
    d["a"] = d
    return d


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE_INTS, nasty_floats, st.text(max_size=40), st.binary(max_size=20),
    st.builds(Hostile), st.builds(object),
)

values = st.one_of(
    scalars,
    big_text(),
    big_list(),
    st.integers(500, 20_000).map(deep_list),
    st.sampled_from(["list", "dict"]).map(cyclic),
    st.recursive(scalars, lambda c: st.one_of(
        st.lists(c, max_size=4), st.tuples(c, c), st.dictionaries(st.text(max_size=8), c, max_size=4),
        st.frozensets(st.one_of(st.integers(), st.text(max_size=8)), max_size=4),
    ), max_leaves=12),
)
"""Anything at all: the value strategy for a field an adversary fills in."""

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE_INTS.filter(lambda n: abs(n) < 2**2000), nasty_floats,
    st.text(max_size=40), big_text(1000, 20_000),
)
json_values = st.recursive(json_scalars, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=10), c, max_size=4),
), max_leaves=12) | st.integers(200, 900).map(deep_list) | st.integers(200, 900).map(deep_dict)
"""What ``json.loads`` could give (NaN and infinity included: Python's json reads them), plus
nesting deep enough to hurt a recursive walker but shallow enough to parse."""


def _children(node: Any) -> list[tuple[Any, Any]]:
    if isinstance(node, dict):
        return list(node.items())
    if isinstance(node, list):
        return list(enumerate(node))
    return []


def mutate(doc: Any, edits: list[tuple[int, int, str, Any]]) -> Any:
    """``doc`` with ``edits`` applied: each (depth, pick, op, value) walks down ``depth`` levels
    choosing the ``pick``-th child (mod the count) and replaces it, deletes it or inserts
    beside it. Works on a copy made by the caller; returns the (possibly replaced) root."""
    for depth, pick, op, value in edits:
        if depth == 0 and op == "replace":
            doc = value
            continue
        node = doc
        for _ in range(max(depth - 1, 0)):
            kids = _children(node)
            if not kids:
                break
            nxt = kids[pick % len(kids)][1]
            if not isinstance(nxt, (dict, list)):
                break
            node = nxt
        kids = _children(node)
        if isinstance(node, dict):
            if op == "insert" or not kids:
                node[f"k{pick}"] = value
            elif op == "delete":
                del node[kids[pick % len(kids)][0]]
            else:
                node[kids[pick % len(kids)][0]] = value
        elif isinstance(node, list):
            if op == "insert" or not kids:
                node.insert(pick % (len(node) + 1), value)
            elif op == "delete":
                del node[pick % len(node)]
            else:
                node[pick % len(node)] = value
    return doc


def mutations(value_strategy: st.SearchStrategy[Any], max_edits: int = 4) -> st.SearchStrategy[list]:
    """Edit lists for ``mutate``."""
    return st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1000), st.sampled_from(["replace", "replace", "delete", "insert"]),
                              value_strategy), min_size=1, max_size=max_edits)


def lines_of(*fragments: st.SearchStrategy[str], max_lines: int = 30) -> st.SearchStrategy[str]:
    """Text made of lines: the given fragments mixed with arbitrary text and huge lines."""
    line = st.one_of(*fragments, st.text(max_size=60), digit_strings(), big_text(1000, 50_000))
    return st.lists(line, max_size=max_lines).map("\n".join) | big_text(100_000, 1_100_000)
