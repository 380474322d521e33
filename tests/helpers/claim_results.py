"""Results documents for the claims' and the report's tests: paper-like conditions over seeds, each model with its
own intervals (or none, as an older file), an APE α sweep, and optional ``alpha_trends``."""

from __future__ import annotations

from peanchor.results.records import SCHEMA_VERSION

ALPHAS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)

# Per condition: SSDC in order and under RPI (4 layers), FS per shift. Paper-like: none/rpt collapse under RPI but
# have a ghost map in order; APE and sin-cos peak early; RoPE builds up; every PE model is clearly less fragile.
PAPER_LIKE = {
    "none": {"normal": [0.45, 0.30, 0.25, 0.20], "rpi": [0.02, 0.03, -0.02, 0.01], "fs": {"jpeg": 0.50, "blur": 0.60}},
    "rpt": {"normal": [0.40, 0.35, 0.30, 0.22], "rpi": [0.01, 0.02, 0.04, 0.03], "fs": {"jpeg": 0.48, "blur": 0.55}},
    "ape": {"normal": [0.6, 0.6, 0.5, 0.5], "rpi": [0.10, 0.45, 0.35, 0.30], "fs": {"jpeg": 0.30, "blur": 0.20}},
    "sincos": {"normal": [0.8, 0.7, 0.6, 0.6], "rpi": [0.30, 0.90, 0.70, 0.65], "fs": {"jpeg": 0.25, "blur": 0.15}},
    "rope": {"normal": [0.5, 0.5, 0.5, 0.5], "rpi": [0.05, 0.15, 0.30, 0.40], "fs": {"jpeg": 0.35, "blur": 0.25}},
}
JITTER = (0.0, 0.01, -0.01)  # seed s moves odd layers and PE models' FS by JITTER[s]: spread for the t-intervals


def claim_model(cond: str, s: dict, seed: int, half: float | None) -> dict:
    """One model; ``half``: the half-width of its own (n = 1) intervals, None: a file without intervals."""
    j = JITTER[seed]
    rpi = [v + j * (i % 2) for i, v in enumerate(s["rpi"])]
    normal = [v + j * (i % 2) for i, v in enumerate(s["normal"])]
    fs = {k: v + (j if cond in ("ape", "sincos", "rope") else 0.0) for k, v in s["fs"].items()}
    m = {"name": f"{cond}-s{seed}", "condition": cond, "pe": "ape" if cond == "rpt" else cond, "rpt": cond == "rpt",
         "seed": seed, "clean_acc": s.get("acc", 0.8), "rpi_acc": 0.5,
         "ssdc": {"normal": normal, "rpi": rpi, "rpi_std": [0.0] * 4}, "delta_ssdc": rpi[1] - rpi[0],
         "acc": {k: 0.8 * (1 - v) for k, v in fs.items()}, "fragility": fs, "chance": 0.1}  # fmt: skip
    if s.get("undefined"):
        m["fragility"] = {k: None for k in fs}
        m["fragility_undefined"] = {k: s["undefined"] for k in fs}
    if half is not None:
        h = s.get("half", half)
        m["ssdc"]["rpi_ci"] = [[v - h for v in rpi], [v + h for v in rpi]]
        m["ssdc"]["normal_ci"] = [[v - h for v in normal], [v + h for v in normal]]
        m["fragility_ci"] = {k: [v - h, v + h] for k, v in fs.items()}
        m["delta_ssdc_ci"] = [m["delta_ssdc"] - h, m["delta_ssdc"] + h]
        m["clean_acc_ci"] = [m["clean_acc"] - h, m["clean_acc"] + h]
    return m


def sweep_rows(seeds, sweep: dict | None) -> list[dict]:
    # The APE α sweep: ΔSSDC shrinks and FS grows as α falls; α = 0 is at chance.
    sweep = sweep if sweep is not None else {a: {"delta": 0.35 * a, "acc": 0.8 if a > 0 else 0.1,
                                                 "fs": {"jpeg": 0.6 - 0.3 * a, "blur": 0.5 - 0.3 * a}}
                                             for a in ALPHAS}  # fmt: skip
    return [{"model": f"ape-s{seed}", "condition": "ape", "seed": seed, "alpha": a,
             "delta_ssdc": p["delta"] + JITTER[seed],
             "ssdc_rpi": [0.1, 0.1 + p["delta"]], "clean_acc": p["acc"],
             "acc": {k: p["acc"] * (1 - v) for k, v in p["fs"].items()},
             "fragility": {k: v + JITTER[seed] * a for k, v in p["fs"].items()}}
            for seed in seeds for a, p in sweep.items()]  # fmt: skip


def claim_results(spec: dict, seeds=(0, 1, 2), sweep: dict | None = None, half: float | None = 0.02,
             trends: dict | None = None) -> dict:  # fmt: skip
    models = [claim_model(c, s, seed, half) for c, s in spec.items() for seed in seeds]
    for m in models:
        if trends is not None and m["condition"] == "ape":
            m["alpha_trends"] = trends
    return {"schema": "peanchor.results.records", "schema_version": SCHEMA_VERSION, "models": models,
            "alpha_sweep": sweep_rows(seeds, sweep) if "ape" in spec else [],
            "shifts": {"jpeg": {"kind": "jpeg", "quality": 10}, "blur": {"kind": "blur", "sigma": 1.0}}}  # fmt: skip
