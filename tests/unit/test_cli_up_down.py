"""``fabric up --config`` without a cluster: a bad file is refused with every problem, before any connection."""

from __future__ import annotations

from fabric.cli import main

BAD = ("pools:\n"
       "  - name: a\n"
       "    tiers: [{name: x, packing: sideways}]\n"
       "  - name: a\n"
       "operations:\n"
       "  enc: {min_tier: cpu_ffmpeg, pool: ghost}\n")


def test_up_with_a_bad_config_prints_every_problem_and_connects_to_nothing(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    # no cluster here, and ray.init raises in unit tests: a connection attempt would show in the output
    assert main(["up", "--config", str(f), "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.splitlines()
    # the one form every command prints a settings file's problems in (fabric settings validate's)
    assert err[0].startswith(f"{f}:3: pools[0].tiers[0].packing: ") and "sideways" in err[0]
    assert any(line.startswith(f"{f}:4: pools[1].name: ") and "defined twice" in line for line in err)
    assert any(line.startswith(f"{f}:6: operations.enc.pool: ") and "ghost" in line for line in err)
    assert err[-2:] == [f"{f}: invalid, 3 problems", "fabric up: nothing started"]
    assert not any("connect" in line for line in err)


def test_up_with_a_missing_config_says_it_cannot_read_it(tmp_path, capsys):
    assert main(["up", "--config", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nope.yaml'}: cannot read settings file" in err and "fabric up: nothing started" in err
