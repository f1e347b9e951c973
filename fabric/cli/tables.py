"""Plain tables and text that fit a terminal, shared by the commands that print them (``fabric
status``, ``nodes``, ``pools``, ``jobs``, ``bundles``...).

A module of its own so a command imports the table helpers without importing another command
(``fabric.cli.node`` imports ``fabric.cli.pools_cmd`` for ``status``; both print tables).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["ELLIPSIS", "NARROW", "add_width_flag", "ago", "clip", "fit_lines", "gpus_cell", "output_width", "render_table"]

NARROW = 80
"""The width a table fits when stdout is not a terminal (a pipe, a file, a test): an 80-column
terminal reads it whole. ``--wide`` lifts the limit (every cell whole, one line per row)."""
ELLIPSIS = "\u2026"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def add_width_flag(parser: Any) -> None:
    """``--wide``: every cell whole, however wide (for grep and awk)."""
    parser.add_argument("--wide", action="store_true", help="print every cell whole, one line per row, however wide")


def output_width(args: argparse.Namespace | None = None, *, isatty: bool | None = None) -> int | None:
    """The columns a command's text fits: None with ``--wide``; the terminal's width on a terminal;
    else ``NARROW`` (80)."""
    if args is not None and getattr(args, "wide", False):
        return None
    if isatty if isatty is not None else sys.stdout.isatty():
        return max(20, shutil.get_terminal_size((NARROW, 24)).columns)
    return NARROW


def clip(text: Any, width: int) -> str:
    """``text`` on one line in at most ``width`` cells: control characters become spaces and a
    longer text ends in an ellipsis."""
    from rich.cells import cell_len, set_cell_size

    text = _CONTROL.sub(" ", str(text))
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)).rstrip() + ELLIPSIS if width > 0 else ""


def render_table(header: Sequence[str], body: Sequence[Sequence[Any]], width: int | None, *, right: Sequence[str] = (),
                 shrink: dict[str, int] | None = None, drop: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """A plain table (no colours, no box) drawn by ``rich``: the header line, then one line per
    row, columns separated by two spaces. Returns the lines and the columns left out.

    ``width`` None: every cell whole. Otherwise each line fits ``width`` cells, in this order of
    resort: two spaces between columns; one; then (one space) the ``shrink`` columns (name -> least width, never
    under the header's) cut with an ellipsis, in the order given, each to its least before the
    next; then the ``drop`` columns left out, in order; last, each line cut at ``width``."""
    from rich.cells import cell_len

    cells = [[_CONTROL.sub(" ", str(c)) for c in row] for row in body]
    natural = [max([cell_len(h), *(cell_len(row[i]) for row in cells)]) for i, h in enumerate(header)]
    least = {h: max(cell_len(h), n) for h, n in (shrink or {}).items()}
    cut_order = list(least)
    shown = list(range(len(header)))
    layout: tuple[list[int], list[int], int] | None = None
    if width is None:
        layout = (shown, natural, 2)
    for left_out in range(len(drop) + 1):
        if layout is not None:
            break
        shown = [i for i, h in enumerate(header) if h not in drop[:left_out]]
        for gap, squeeze in ((2, False), (1, False), (1, True)):  # before a cell is cut, the gaps narrow
            widths = [natural[i] for i in shown]
            room = width - gap * (len(shown) - 1)
            if squeeze:
                order = sorted((k for k, i in enumerate(shown) if header[i] in least), key=lambda k: cut_order.index(header[shown[k]]))
                widths = _squeeze(widths, [least.get(header[i]) for i in shown], order, room)
            if sum(widths) <= room:
                layout = (shown, widths, gap)
                break
    if layout is None:  # narrower than the columns that must stay whole: cut each line
        shown = [i for i, h in enumerate(header) if h not in drop]
        layout = (shown, [natural[i] for i in shown], 1)
    shown, widths, gap = layout
    rows = [[row[i] for i in shown] for row in [list(header), *cells]]
    lines = _draw(rows, widths, gap, [header[i] in right for i in shown])
    if width is not None:
        lines = [clip(line, width) for line in lines]
    return lines, [h for i, h in enumerate(header) if i not in shown]


def _draw(rows: list[list[str]], widths: list[int], gap: int, right: list[bool]) -> list[str]:
    """``rows`` (the header first) drawn by a ``rich.table.Table``: no box, no styles, ``gap``
    spaces between columns, each column exactly its width (cells clipped to it first, so rich never
    cuts one), right-justified where ``right`` says; trailing spaces stripped."""
    if not widths:  # every column left out: an empty line per row
        return [""] * len(rows)
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style=None, show_edge=False, pad_edge=False, padding=(0, gap, 0, 0),
                  expand=False, highlight=False)
    for w, r in zip(widths, right):
        table.add_column(width=w, justify="right" if r else "left", no_wrap=True, overflow="crop")
    header, *body = [[_cell(clip(c, w), w, r) for c, w, r in zip(row, widths, right)] for row in rows]
    for column, cell in zip(table.columns, header):
        column.header = cell
    for row in body:
        table.add_row(*row)
    out = io.StringIO()
    console = Console(file=out, width=sum(widths) + gap * len(widths) + 1, color_system=None, no_color=True, highlight=False,
                      markup=False, emoji=False, force_terminal=False, force_jupyter=False, force_interactive=False,
                      soft_wrap=False, legacy_windows=False)
    console.print(table)
    return [line.rstrip() for line in out.getvalue().split("\n")[:len(rows)]]


def _cell(text: str, width: int, right: bool) -> Text:
    """One clipped cell as rich text. Rich's right-justify drops a cell's trailing spaces; such a
    cell (a control character at its end became a space) is padded here and left as it is."""
    from rich.cells import cell_len
    from rich.text import Text

    if right and text != text.rstrip():
        return Text(" " * (width - cell_len(text)) + text, justify="default", end="")
    return Text(text, end="")


def _squeeze(widths: list[int], least: list[int | None], order: list[int], room: int) -> list[int]:
    """``widths`` with the shrinkable columns (``order``: their positions, first cut first) each
    narrowed to its ``least`` before the next, until they fit ``room``."""
    widths = list(widths)
    for i in order:
        excess = sum(widths) - room
        if excess <= 0:
            break
        widths[i] = max(least[i] or 0, widths[i] - excess)
    return widths


def fit_lines(text: str, width: int | None) -> str:
    """``text`` with each line longer than ``width`` wrapped at spaces (continuations indented four
    past the line's own indent; a word longer than the room is cut with an ellipsis)."""
    import textwrap

    if width is None:
        return text
    out = []
    for line in text.splitlines():
        line = _CONTROL.sub(" ", line).rstrip()
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        hang = (indent + "    ")[:max(0, width // 2)]
        wrapped = textwrap.wrap(line.strip(), width=width, initial_indent=indent, subsequent_indent=hang,
                                break_long_words=False, break_on_hyphens=False) or [line]
        out.extend(clip(w, width) for w in wrapped)
    return "\n".join(out)


def gpus_cell(models: Sequence[str]) -> str:
    """GPU models as one short cell: runs of one model counted (``8x NVIDIA H100``), else ``-``."""
    parts: list[list[Any]] = []
    for m in models:
        if parts and parts[-1][0] == m:
            parts[-1][1] += 1
        else:
            parts.append([m, 1])
    return ", ".join(m if n == 1 else f"{n}x {m}" for m, n in parts) or "-"


def ago(now: float, then: float | None) -> str:
    """How long before ``now`` ``then`` was (``4.2s ago``, ``3m ago``, ``1.5h ago``); ``never`` for none."""
    if not then:
        return "never"
    s = max(0.0, now - then)
    return f"{s:.1f}s ago" if s < 60 else (f"{s / 60:.0f}m ago" if s < 3600 else f"{s / 3600:.1f}h ago")
