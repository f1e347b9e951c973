"""``fabric migrations`` and ``fabric drain --status`` draw their tables through ``render_table``
(rich): every line fits 80 columns, long cells end in an ellipsis, the age is right-aligned."""

from __future__ import annotations

from unittest import mock

from fabric.cli import moves_cmd
from fabric.cli.moves_cmd import drain_lines, format_migrations

ROWS = [{"migration_id": "m-abcdef123456", "job_id": "encoder-very-long-job-name-that-goes-on", "strategy": "stop_then_start",
         "phase": "preparing", "source_name": "workstation-1", "target_name": "steamdeck", "age_s": 12.3},
        {"migration_id": "m-2", "job_id": "j2", "strategy": "overlap", "phase": "done", "source_name": "a",
         "target_name": "b", "age_s": 1.0}]


def test_the_migrations_table_fits_80_columns_with_ellipses_and_a_right_aligned_age():
    lines = format_migrations(ROWS).splitlines()
    assert lines[0].split() == ["ID", "JOB", "STRATEGY", "PHASE", "SOURCE", "->", "TARGET", "AGE"]
    assert all(len(line) <= 80 for line in lines)
    assert "\u2026" in lines[1] and lines[1].endswith("12s") and lines[2].endswith(" 1s")


def test_the_drain_s_job_table_goes_through_render_table():
    state = {"node_id": "n1", "phase": "waiting", "jobs": {
        "job-a": {"status": "moving", "migration_id": "m-1", "reason": "x" * 200}, "b": "staying"}}
    with mock.patch.object(moves_cmd, "render_table", wraps=moves_cmd.render_table) as spy:
        lines = drain_lines(state, 0.0)
    assert spy.called
    table = lines[lines.index(next(line for line in lines if line.lstrip().startswith("JOB"))):]
    assert [line.split()[0] for line in table] == ["JOB", "b", "job-a"]
    assert all(len(line) <= 80 for line in table) and table[-1].endswith("\u2026")
