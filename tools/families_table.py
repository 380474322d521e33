"""The cross-family table of docs/families.md, from a study's ``results.json``.

::

    peanchor reproduce --preset families --seeds 3 --out runs/families
    python tools/families_table.py runs/families/results.json            # prints the table
    python tools/families_table.py runs/families/results.json --write    # rewrites the blocks in docs/families.md

Two tables: the study's numbers per condition, and top-1 at other resolutions (``analysis.resolutions``, each PE
moved to the grid by its own convention) with A(size)/A(native), where the results have them. Each cell is the mean
over the condition's seeds with a 95 % t-interval over the seeds, so seed-to-seed variation is in it. An FS or an
A(size)/A(native) that is undefined in some seed (the clean accuracy not above chance by its interval) is left out of
that mean, and the cell says in how many seeds it was defined.
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
RES_BEGIN, RES_END = "<!-- families-resolution:begin", "<!-- families-resolution:end -->"


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
    from peanchor.results.records import read_results

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


def resolution_table(path: Path) -> str | None:
    """Top-1 and A(size)/A(native) per condition and image size (None: no model has the record)."""
    from peanchor.results.records import read_results

    results = read_results(path)
    sizes = sorted({p.size for m in results.models if m.resolution for p in m.resolution.points})
    if not sizes:
        return None
    native = next(m.resolution.native for m in results.models if m.resolution)
    others = [s for s in sizes if s != native]
    grid = {p.size: p.grid for m in results.models if m.resolution for p in m.resolution.points}
    named = [f"{s} px ({grid[s][0]}×{grid[s][1]})" for s in sizes]
    rows = ["| condition | seeds | " + " | ".join(f"top-1 {n}" + (", native" if s == native else "")
                                                for s, n in zip(sizes, named))
            + " | " + " | ".join(f"A/A_native {s} px" for s in others) + " |",
            "|---|---|" + "---|" * (len(sizes) + len(others))]  # fmt: skip
    for condition in dict.fromkeys(m.condition for m in results.models):
        models = [m for m in results.models if m.condition == condition and m.resolution]
        cells = [interval([p.acc for m in models if (p := m.resolution.point(s))]) for s in sizes]
        for s in others:
            values = [p.relative for m in models if (p := m.resolution.point(s))]
            defined = sum(v is not None and math.isfinite(v) for v in values)
            cells.append(interval(values) + ("" if defined == len(values) else f" ({defined} of {len(values)} seeds)"))
        rows.append(f"| `{condition}` | {len(models)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _rewrite(doc: str, begin: str, end: str, text: str) -> str | None:
    """``doc`` with the block between ``begin`` and ``end`` replaced by ``text``; None where it has no such block."""
    block = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not block.search(doc):
        return None
    new = f"{begin} (tools/families_table.py writes this table) -->\n{text}\n{end}"
    return block.sub(lambda _: new, doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the study's results.json")
    parser.add_argument("--write", action="store_true", help="rewrite the table block of docs/families.md")
    args = parser.parse_args(argv)
    blocks = [(BEGIN, END, table(args.results)), (RES_BEGIN, RES_END, resolution_table(args.results))]
    blocks = [b for b in blocks if b[2] is not None]
    if not args.write:
        print("\n\n".join(text for _, _, text in blocks))
        return 0
    page = ROOT / "docs" / "families.md"
    doc = page.read_text()
    for begin, end, text in blocks:
        rewritten = _rewrite(doc, begin, end, text)
        if rewritten is None:
            print(f"{page}: no {begin} ... {end} block", file=sys.stderr)
            return 1
        doc = rewritten
    page.write_text(doc)
    print(f"wrote the tables of {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
