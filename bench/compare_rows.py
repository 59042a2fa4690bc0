"""Compare two row files of walk_rows.py or grpo_rows.py: the paths of the fields that differ, or "identical".

    python bench/compare_rows.py bench/baselines/walk-a237298.json walk-merged.json

`label` is ignored; anything under a `timing` key is compared as a ratio (B / A), printed for information and
never counted as a difference. Exit status 1 when the rows differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

IGNORED = frozenset({"label"})


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where a and b differ (a list of records is compared item by item, and by its length)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            where = f"{path}.{key}" if path else key
            if key in IGNORED or key == "timing":
                continue
            if key not in a or key not in b:
                found.append(f"{where}: only in {'B' if key not in a else 'A'}")
            else:
                found += differences(a[key], b[key], where)
        return found
    if isinstance(a, list) and isinstance(b, list):
        found = [f"{path}: {len(a)} items in A, {len(b)} in B"] if len(a) != len(b) else []
        for index, (left, right) in enumerate(zip(a, b, strict=False)):
            found += differences(left, right, f"{path}[{index}]")
        return found
    return [] if a == b else [f"{path}: {json.dumps(a, ensure_ascii=False)[:200]} != {json.dumps(b, ensure_ascii=False)[:200]}"]


def timing_ratios(a: Any, b: Any, path: str = "timing") -> list[str]:
    """B / A of every number under `timing` that both files hold."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [line for key in sorted(set(a) & set(b)) for line in timing_ratios(a[key], b[key], f"{path}.{key}")]
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) and a:
        return [f"{path}: {a} -> {b} ({b / a:.2f}x)"]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--all-timing", action="store_true", help="every timing ratio, not only the summary ones")
    args = parser.parse_args()
    a, b = (json.loads(path.read_text()) for path in (args.a, args.b))
    ratios = timing_ratios(a.get("timing", {}), b.get("timing", {}))
    for line in ratios if args.all_timing else [line for line in ratios if ".per_step." not in line]:
        print(f"timing (information only) {line}")
    found = differences(a, b)
    print("identical" if not found else "\n".join(found))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
