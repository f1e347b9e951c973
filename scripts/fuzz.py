#!/usr/bin/env python
"""Fuzz every boundary where outside input enters the fabric, as an adversarial user would.

    python scripts/fuzz.py [--examples N] [--json] [--surface NAME ...] [--seed S]

Runs each registered fuzz surface (``tests/fuzz/surfaces_pure.py``, which brings in the probe
surfaces, ``tests/fuzz/surfaces_registry.py`` and ``tests/fuzz/surfaces_scheduler.py`` when they exist) for N examples and prints one
row per surface: inputs tried, clean typed refusals, crashes (any other exception, or an example
past its time guard), refused inputs that were stored anyway, and the slowest example. The first
crashing inputs of a surface are printed under the table. With ``--json`` the last line is
``{"surfaces": {name: {"tried", "typed", "crashes", "stored_on_refusal"}}}``. Exit code 1 when any
surface crashed or stored a refusal.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ_DIR = ROOT / "tests" / "fuzz"
SURFACE_MODULES = ("surfaces_pure", "surfaces_registry", "surfaces_scheduler")


def load_surfaces() -> dict:
    """Import the surface modules (the registry's only when present) and return ``SURFACES``."""
    for path in (ROOT, FUZZ_DIR):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    from fabric.testing.fuzz import SURFACES

    for module in SURFACE_MODULES:
        if (FUZZ_DIR / f"{module}.py").exists():
            importlib.import_module(module)
    return SURFACES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="examples per surface (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line, last")
    parser.add_argument("--surface", action="append", metavar="NAME", help="run only this surface (repeatable)")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run: the same seed draws the same inputs")
    args = parser.parse_args(argv)
    if args.examples < 1:
        parser.error("--examples must be at least 1")

    from rich.console import Console
    from rich.table import Table

    from fabric.testing.fuzz import run_surface

    surfaces = load_surfaces()
    names = args.surface or list(surfaces)
    unknown = [n for n in names if n not in surfaces]
    if unknown:
        parser.error(f"unknown surface(s) {', '.join(unknown)}; surfaces: {', '.join(surfaces)}")
    # Progress and the table go to stderr under --json, so stdout's last line is the JSON.
    console = Console(stderr=args.json, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 110)  # piped: keep whole surface names on one line
    results: dict[str, dict] = {}
    started = time.perf_counter()
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        with console.status(f"[{i}/{len(names)}] {name}: {args.examples} examples"):
            results[name] = run_surface(surfaces[name], args.examples, seed=args.seed)
        r = results[name]
        mark = "ok" if r["crashes"] == 0 and r["stored_on_refusal"] == 0 else "FAIL"
        console.print(f"[{i}/{len(names)}] {name}: {r['tried']} tried, {r['typed']} typed, {r['crashes']} crashes, "
                      f"{r['stored_on_refusal']} stored on refusal ({time.perf_counter() - t0:.1f} s) {mark}")

    table = Table(title=f"fuzz: {args.examples} examples per surface, {time.perf_counter() - started:.0f} s")
    for col in ("surface", "tried", "typed errors", "crashes", "stored on refusal", "slowest ms"):
        table.add_column(col, justify="left" if col == "surface" else "right", no_wrap=col == "surface")
    for name, r in results.items():
        bad = r["crashes"] or r["stored_on_refusal"]
        table.add_row(name, str(r["tried"]), str(r["typed"]), str(r["crashes"]), str(r["stored_on_refusal"]),
                      f"{r['slowest_ms']:.1f}", style="red" if bad else None)
    console.print(table)
    for name, r in results.items():
        for kind, label in (("examples_of_crashes", "crash"), ("examples_of_stored", "stored on refusal")):
            for ex in r[kind]:
                console.print(f"{name} {label}: {ex.get('error', '')}\n  at {ex.get('where', '-')}\n  input {ex['input']}",
                              markup=False)
    if args.json:
        keys = ("tried", "typed", "crashes", "stored_on_refusal")
        print(json.dumps({"surfaces": {name: {k: r[k] for k in keys} for name, r in results.items()}}))
    return 1 if any(r["crashes"] or r["stored_on_refusal"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
