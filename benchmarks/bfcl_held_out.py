"""What the function-calling agent's held-out answers got, per run, round and category: the share of
answers whose calls parse, that name the right function, and that BFCL's checker passes, and the
checker's most common error types. Read back from the ``bfcl.verdict`` spans a run left.

    python benchmarks/bfcl_held_out.py /tmp/bfclrun/rl-seed0 /tmp/bfclrun/shuffled-seed0 [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from loop_runs import REPO  # noqa: F401  (puts the repository root on sys.path, for examples.*)

from examples.bfcl.recipe import verdicts


def shares(run: Path) -> list[dict]:
    """Per round and category: episodes, parsed, right function, passed (counts) and the top error types."""
    rows = []
    for folder in sorted((run / "rounds").iterdir()):
        spans = folder / "data" / "spans"
        if not spans.exists():
            continue
        by_category: dict[str, list[dict]] = {}
        for verdict in verdicts(spans):
            by_category.setdefault(verdict["category"], []).append(verdict)
        for category, got in sorted(by_category.items(), key=lambda item: item[0] != "simple_python"):
            errors = Counter(v["error_type"] for v in got if not v["valid"])
            rows.append({"run": run.name, "round": int(folder.name), "category": category, "episodes": len(got),
                         "parsed": sum(v["parsed"] for v in got), "right_function": sum(v["right_function"] for v in got),
                         "passed": sum(v["valid"] for v in got), "errors": dict(errors.most_common(3))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders of benchmarks/learning.py --out (VARIANT-seedN)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    rows = [row for run in args.runs for row in shares(run)]
    print("| run | round | category | parse | right function | pass (BFCL) | top errors |\n|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["episodes"]
        errors = ", ".join(f"{k.rpartition(':')[2] or k} {v}" for k, v in r["errors"].items())
        print(f"| {r['run']} | {r['round']} | {r['category']} | {r['parsed']}/{n} | {r['right_function']}/{n} | {r['passed']}/{n} | {errors} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
