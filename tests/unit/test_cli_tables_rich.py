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
