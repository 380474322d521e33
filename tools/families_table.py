"""The cross-family table of docs/families.md, from a study's ``results.json``.

::

    peanchor reproduce --preset families --seeds 3 --out runs/families
    python tools/families_table.py runs/families/results.json            # prints the table
    python tools/families_table.py runs/families/results.json --write    # rewrites the block in docs/families.md

Each cell is the mean over the condition's seeds with a 95 % t-interval over the seeds (the report's rule from two
seeds on), so seed-to-seed variation is in it. An FS that is undefined in some seed (its clean accuracy not above
chance by its interval) is left out of that mean, and the cell says in how many seeds it was defined.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BEGIN, END = "<!-- families:begin", "<!-- families:end -->"


def interval(values: list[float]) -> str:
    from scipy import stats

    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "undefined"
    mean = sum(values) / len(values)
    if len(values) < 2:
        return f"{mean:.3f} (1 seed)"
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def table(path: Path) -> str:
    from peanchor.results import read_results

    results = read_results(path)
    rows = ["| condition | seeds | clean acc | FS jpeg | FS blur | max SSDC under RPI | max probe R² under RPI | ΔSSDC |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for condition in dict.fromkeys(m.condition for m in results.models):
        models = [m for m in results.models if m.condition == condition]
        probe = [m.position_probe for m in models if m.position_probe is not None]
        r2 = [max((r + c) / 2 for r, c in zip(p.row.rpi, p.col.rpi)) for p in probe] if probe else []
        cells = [interval([m.clean_acc for m in models])]
        for shift in ("jpeg", "blur"):
            values = [m.fragility.get(shift) for m in models]
            defined = sum(v is not None and math.isfinite(v) for v in values)
            cells.append(interval(values) + ("" if defined == len(values) else f" ({defined} of {len(values)} seeds)"))
        cells += [interval([max(m.ssdc.rpi) for m in models]), interval(r2) if r2 else "—",
                  interval([m.delta_ssdc for m in models])]  # fmt: skip
        rows.append(f"| `{condition}` | {len(models)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the study's results.json")
    parser.add_argument("--write", action="store_true", help="rewrite the table block of docs/families.md")
    args = parser.parse_args(argv)
    text = table(args.results)
    if not args.write:
        print(text)
        return 0
    page = ROOT / "docs" / "families.md"
    doc = page.read_text()
    block = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not block.search(doc):
        print(f"{page}: no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    new = f"{BEGIN} (tools/families_table.py writes this table) -->\n{text}\n{END}"
    page.write_text(block.sub(lambda _: new, doc))
    print(f"wrote the table of {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
