"""The README's demo, end to end: a live local fabric, a GPU node killed mid-burst and rejoined,
and nothing lost (``./scripts/demo`` runs the same module after setting up). It runs without a
terminal here: no bars, no colours, one line per burst, and none of Ray's own output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

RAY_LOG_MARKS = ("Raylet is terminated", "(raylet)", "[state-dump]", "raylet state", "Traceback", "retries remaining",
                 "has been marked dead", "worker.py:", "Connecting to existing Ray cluster")
"""What Ray's own output looks like on the terminal (a dead raylet's last log lines, its task
retry and node-death notices, its loggers' ``file.py:line --`` lines): none of it may show."""


def test_demo_runs_four_phases_and_loses_nothing():
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_live.py"), "--tasks", "12"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
    for phase in ("1. whole fleet up", "2. GPU workstation killed mid-burst", "3. workstation rejoined"):
        assert phase in text
    assert text.count("lost: 0") == 3 and "36 calls, 0 lost" in text
    assert re.search(r"gpu_cuda\s+gpu-cuda-workstation\s+\d+", text)  # the best tier did work
    assert "edge-relay" not in text.split("phase 1")[1]  # below the floor: never used
    rejoined = text.split("phase 3")[1]  # absorbed at once: not held by flap damping, best tier first
    assert re.search(r"gpu-cuda-workstation rejoined; registered in \d+\.\d s, absorbed by the scheduler in \d+\.\d s; "
                     r"the next call went to gpu-cuda-workstation", rejoined)
    assert re.search(r"gpu_cuda\s+gpu-cuda-workstation\s+\d+", rejoined)

    # The story, not Ray's internals: nothing of Ray's on either stream, no colours, no bars.
    both = text + out.stderr
    for mark in RAY_LOG_MARKS:
        assert mark not in both, f"Ray's output leaked: {mark!r}\n{both[-3000:]}"
    assert not re.search(r"^.*\b(WARNING|INFO|ERROR)\b.*$", both, re.M), both[-3000:]
    assert "\x1b[" not in both and "━" not in both  # rich's bars draw with ━
    assert re.search(r"^    12 transcodes in \d+\.\d s$", text, re.M)  # one line per burst instead of a bar

    # One line for the kill, with what was measured.
    kill = re.search(r"^    killed gpu-cuda-workstation; Ray declared it dead in (\d+\.\d) s"
                     r"(?: \(the fabric took it offline at (\d+\.\d) s\))?; (.*)$", text, re.M)
    assert kill, text
    assert 0 < float(kill.group(1)) < 30 and (kill.group(2) is None or float(kill.group(2)) < 30)
    assert re.fullmatch(r"\d+ calls? re-placed inside the floor|no call had to be re-placed", kill.group(3)), kill.group(3)

    # Phase 4: the bundle's primary came back on another node while its backup kept producing.
    assert "4. a bundle's primary encoder loses its node" in text
    placed = re.search(r"^    bundle channel-1: primary on (\S+), backup on (\S+)$", text, re.M)
    assert placed and placed.group(1) != placed.group(2), text[-2000:]
    moved = re.search(r"^    killed (\S+) \(the primary's node\); the primary was down (\d+\.\d) s and came back on (\S+); "
                      r"the backup produced (\d+) frames meanwhile$", text, re.M)
    assert moved and moved.group(1) == placed.group(1) and moved.group(3) != placed.group(1), text[-2000:]
    assert int(moved.group(4)) > 0
    assert re.search(r"primary restarts in the last hour: 1$", text, re.M)

    # phase 5: the workstation drained mid-stream; the encoder moved by handover, no frame lost or repeated
    assert "5. gpu-cuda-workstation drained mid-stream" in text
    assert "encoder job on gpu-cuda-workstation" in text
    assert re.search(r"^    drained gpu-cuda-workstation \(done, jobs migrated, in \d+\.\d s\); the encoder now runs on "
                     r"(?!gpu-cuda-workstation)\S+; Ray's drain: accepted$", text, re.M), text[-2000:]
    assert re.search(r"^    frames around the move: \d+, gap 0 ms, repeated 0, writers 2$", text, re.M), text[-2000:]

    # Ray's output went to the session's log folder instead of nowhere.
    where = re.search(r"Ray's own output: (\S+) \(this driver's: (\S+)\)", text)
    assert where, text
    log = Path(where.group(1)) / where.group(2)
    assert log.is_file() and "Connecting to existing Ray cluster" in log.read_text(errors="replace")
