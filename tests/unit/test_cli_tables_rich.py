"""``render_table`` draws its lines with ``rich.table.Table`` (the project's one way to print a
table), and the layout it draws holds for double-width (CJK) cells and right-justified columns."""

from __future__ import annotations

import rich.table
from rich.cells import cell_len

from fabric.cli.tables import ELLIPSIS, render_table


def test_render_table_draws_through_a_rich_table(monkeypatch):
    made: list[rich.table.Table] = []
    real = rich.table.Table

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(rich.table, "Table", Spy)
    lines, left_out = render_table(("NAME", "COUNT"), [("alpha", "7"), ("b", "12")], None, right=("COUNT",))
    assert lines == ["NAME   COUNT", "alpha      7", "b         12"] and left_out == []
    assert len(made) == 1
    table = made[0]
    assert table.box is None and [c.width for c in table.columns] == [5, 5]
    assert [c.justify for c in table.columns] == ["left", "right"] and all(c.no_wrap for c in table.columns)
    assert table.row_count == 2


def test_wide_characters_and_a_right_column_line_up_in_cells():
    header = ("名前", "N", "NOTE")
    body = [("東京都", "3", "ok"), ("x", "12345", "界" * 20)]
    whole, _ = render_table(header, body, None, right=("N",))
    assert whole == ["名前        N  NOTE",
                     "東京都      3  ok",
                     "x       12345  " + "界" * 20]
    fitted, left_out = render_table(header, body, 30, right=("N",), shrink={"NOTE": 4})
    assert left_out == [] and max(cell_len(x) for x in fitted) <= 30
    assert fitted[1] == "東京都     3 ok"  # one space between columns before a cell is cut
    assert fitted[2] == "x      12345 " + "界" * 8 + ELLIPSIS  # a double-width cell cut at a whole character
    narrow, left_out = render_table(header, body, 12, right=("N",), drop=("NOTE",))
    assert left_out == ["NOTE"] and narrow == ["名前       N", "東京都     3", "x      12345"]


def test_a_right_cell_ending_in_a_control_character_keeps_its_place():
    lines, _ = render_table(("ID", "N"), [("a", "7\t"), ("b", "10")], None, right=("N",))
    assert lines == ["ID   N", "a   7", "b   10"]


def _by_hand(rows: list[list[str]], widths: list[int], gap: int, right: list[bool]) -> list[str]:
    """The lines as written by hand before rich drew them: each cell clipped, padded to its width
    (on the left in a right column), joined by ``gap`` spaces, trailing spaces stripped."""
    from fabric.cli.tables import clip

    lines = []
    for row in rows:
        parts = []
        for text, w, r in zip(row, widths, right):
            cell = clip(text, w)
            pad = " " * (w - cell_len(cell))
            parts.append(pad + cell if r else cell + pad)
        lines.append((" " * gap).join(parts).rstrip())
    return lines


def test_the_rich_drawing_is_byte_identical_to_the_hand_written_lines():
    import random

    from fabric.cli.tables import _draw

    alphabet = ["a", "Z", "1", "-", " ", "界", "語", "é", ELLIPSIS]
    for seed in range(400):
        rng = random.Random(seed)
        ncols = rng.randint(1, 6)
        rows = [["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(ncols)]
                for _ in range(rng.randint(1, 5))]
        widths = [rng.randint(1, 14) for _ in range(ncols)]
        gap = rng.choice([1, 2])
        right = [rng.random() < 0.4 for _ in range(ncols)]
        assert _draw(rows, widths, gap, right) == _by_hand(rows, widths, gap, right), seed
