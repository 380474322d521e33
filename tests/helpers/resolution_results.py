"""A ``resolution`` record for the models of a synthetic results document (tests/helpers/claim_results.py): top-1 at
8, 16 (native) and 24 px per condition and seed, for the report's and the families table's tests."""

from __future__ import annotations

# Per condition and seed: top-1 at 8, 16 (native) and 24 px. `rope` collapses off its grid, below `none`.
ACC = {
    "none": [(0.30, 0.40, 0.32), (0.31, 0.41, 0.33), (0.29, 0.39, 0.31)],
    "ape": [(0.40, 0.80, 0.50), (0.42, 0.82, 0.52), (0.38, 0.78, 0.48)],
    "rope": [(0.10, 0.80, 0.12), (0.11, 0.81, 0.13), (0.09, 0.79, 0.11)],
}


def with_resolution(doc: dict, half: float = 0.01) -> dict:
    """``doc`` with a ``resolution`` record in every model of ACC's conditions (intervals ``half`` wide)."""
    for m in doc["models"]:
        accs = ACC[m["condition"]][m["seed"]]
        native = accs[1]
        m["resolution"] = {
            "native": 16, "coordinates": "extrapolate", "table_mode": "bicubic, antialiased", "resize": "bilinear",
            "points": [{"size": s, "grid": [s // 4, s // 4], "acc": a, "relative": a / native,
                        "acc_ci": [a - half, a + half], "relative_ci": [a / native - half, a / native + half]}
                       for s, a in zip((8, 16, 24), accs)],
        }  # fmt: skip
    return doc
