#!/usr/bin/env python3
"""Where a test run spends its time, from pytest's ``--durations=0`` lines.

    ./scripts/test --durations=0 | tee run.log          # or any pytest run with --durations=0
    python scripts/suite_time.py run.log                 # seconds per module, slowest first
    python scripts/suite_time.py run.log --match start_at --match 'events_live.py::test_a_job_placement'

A test's time is its setup, call and teardown; a module's is the sum of its tests'. With ``--match``
(a regular expression, searched in each test's id; repeatable) it prints the tests that match and
their total: what a group of tests (those one feature added, say) costs the suite. ``--json`` prints
one JSON object instead. Without a file it reads standard input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from typing import Iterable

LINE = re.compile(r"^\s*(?P<secs>[0-9.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)\s*$")


def durations(lines: Iterable[str]) -> dict[str, float]:
    """Seconds per test id (setup + call + teardown) from ``--durations=0`` lines."""
    out: dict[str, float] = defaultdict(float)
    for line in lines:
        m = LINE.match(line)
        if m:
            out[m["test"]] += float(m["secs"])
    return dict(out)


def by_module(tests: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for test, secs in tests.items():
        out[test.split("::", 1)[0]] += secs
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", help="a pytest output with --durations=0 (default: standard input)")
    ap.add_argument("--match", action="append", default=[], help="a regular expression over test ids (repeatable)")
    ap.add_argument("--top", type=int, default=30, help="modules listed (default 30)")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    args = ap.parse_args(argv)
    try:
        patterns = [re.compile(p) for p in args.match]
    except re.error as exc:
        ap.error(f"--match: not a regular expression: {exc}")
    try:
        text = open(args.log, encoding="utf-8", errors="replace") if args.log else sys.stdin
    except OSError as exc:
        ap.error(f"cannot read {args.log}: {exc.strerror}")
    with text:
        tests = durations(text)
    if not tests:
        print("no --durations=0 lines found: run pytest with --durations=0", file=sys.stderr)
        return 1
    modules = sorted(by_module(tests).items(), key=lambda kv: -kv[1])
    matched = {t: s for t, s in tests.items() if any(p.search(t) for p in patterns)}
    total = sum(tests.values())
    if args.json:
        print(json.dumps({"total_s": round(total, 1), "tests": len(tests),
                          "modules": {m: round(s, 1) for m, s in modules},
                          **({"matched": {t: round(s, 1) for t, s in sorted(matched.items())},
                              "matched_s": round(sum(matched.values()), 1)} if patterns else {})}))
        return 0
    print(f"{total:.0f} s ({total / 60:.1f} min) in {len(tests)} tests, {len(modules)} modules")
    for module, secs in modules[: args.top]:
        print(f"{secs:8.1f} s  {module}")
    if patterns:
        print(f"\nmatching {', '.join(args.match)}:")
        for test, secs in sorted(matched.items(), key=lambda kv: -kv[1]):
            print(f"{secs:8.1f} s  {test}")
        print(f"{sum(matched.values()):8.1f} s  in {len(matched)} test(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
