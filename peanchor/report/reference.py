"""The paper's reference numbers (PAPER.md, "Reference numbers"), as data.

Source: arXiv 2606.00124 (Mannes, 2026). ViT with 12 blocks, width 384, 8 heads, patch 16 on 224 px
ImageNet-100, 60 epochs, 4 seeds per condition, shifts JPEG quality 5 and Gaussian blur (kernel 5,
σ 2.5). Keys use peanchor's condition names; :data:`PAPER_NAMES` gives the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "APE_ALPHA_SWEEP",
    "CONDITION_ORDER",
    "PAPER_DATASET",
    "PAPER_IMG_SIZE",
    "PAPER_LABEL",
    "PAPER_NAMES",
    "PAPER_SEEDS",
    "PAPER_SHIFTS",
    "PRETRAINED_VIT_B_SSDC_RPI",
    "REFERENCE_TABLE",
    "SPE_ALPHA_SWEEP",
    "SSDC_LAYER_NOTES",
    "MeanStd",
    "display_name",
]

PAPER_DATASET = "ImageNet-100"
PAPER_IMG_SIZE = 224
PAPER_SEEDS = 4
# How every reference number is labelled in reports, so that nobody mistakes it for ours.
PAPER_LABEL = "paper, ImageNet-100"
PAPER_SHIFTS: dict[str, dict[str, Any]] = {
    "jpeg": {"kind": "jpeg", "quality": 5},
    "blur": {"kind": "blur", "kernel_size": 5, "sigma": 2.5},
}

# peanchor condition -> the paper's name for it (conditions the paper did not run get a plain label).
PAPER_NAMES: dict[str, str] = {
    "none": "ablated",
    "ape": "APE",
    "sincos": "SPE",
    "rope": "RoPE",
    "rope_mixed": "RoPE-Mixed",
    "rpt": "RPT",
    "peg": "PEG",
    "relbias": "relative bias",
}
# The order conditions appear in tables and legends.
CONDITION_ORDER: tuple[str, ...] = ("none", "ape", "sincos", "rope", "rope_mixed", "rpt", "peg", "relbias")


def display_name(condition: str) -> str:
    """``"sincos (SPE)"``-style label: our name, and the paper's where it differs."""
    paper = PAPER_NAMES.get(condition)
    return condition if paper is None or paper.lower() == condition else f"{condition} ({paper})"


@dataclass(frozen=True)
class MeanStd:
    """A mean ± standard deviation over the paper's 4 seeds."""

    mean: float
    std: float


# condition -> metric -> mean ± std over 4 seeds. Metrics: clean top-1 accuracy, FS under JPEG, FS under blur.
REFERENCE_TABLE: dict[str, dict[str, MeanStd]] = {
    "ape": {"clean_acc": MeanStd(0.6406, 0.0018), "fs_jpeg": MeanStd(0.4347, 0.0132), "fs_blur": MeanStd(0.1842, 0.0141)},
    "sincos": {"clean_acc": MeanStd(0.6568, 0.0069), "fs_jpeg": MeanStd(0.4351, 0.0086), "fs_blur": MeanStd(0.2082, 0.0054)},
    "rope": {"clean_acc": MeanStd(0.6901, 0.0042), "fs_jpeg": MeanStd(0.2988, 0.0065), "fs_blur": MeanStd(0.1474, 0.0131)},
    "none": {"clean_acc": MeanStd(0.5682, 0.0056), "fs_jpeg": MeanStd(0.6458, 0.0119), "fs_blur": MeanStd(0.2984, 0.0085)},
    "rpt": {"clean_acc": MeanStd(0.5595, 0.0054), "fs_jpeg": MeanStd(0.6297, 0.0038), "fs_blur": MeanStd(0.2427, 0.0123)},
}

# APE α sweep, 4 seeds, means. ΔSSDC under RPI; FS is the JPEG Fragility Score (it equals the APE JPEG FS
# of the table above at α = 1). ΔSSDC is reported as 0 for every α <= 0.4.
APE_ALPHA_SWEEP: dict[str, Any] = {
    "condition": "ape",
    "seeds": 4,
    "alpha": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
    "delta_ssdc": [0.47, 0.39, 0.31, 0.18, 0.10, 0.05, 0.0, 0.0, 0.0, 0.0],
    "fs_jpeg": [0.434, 0.452, 0.478, 0.515, 0.560, 0.598, 0.627, 0.643, 0.648, 0.652],
}

# SPE α sweep, 1 seed: only the endpoints are given ("ΔSSDC .29 -> .02 smoothly; FS .44 -> .64").
SPE_ALPHA_SWEEP: dict[str, Any] = {
    "condition": "sincos",
    "seeds": 1,
    "alpha": [1.0, 0.1],
    "delta_ssdc": [0.29, 0.02],
    "fs_jpeg": [0.44, 0.64],
}

# What the paper says about SSDC per layer under RPI (qualitative).
SSDC_LAYER_NOTES: dict[str, str] = {
    "ape": "peaks around 0.5-0.6 by layers 1-2, then declines",
    "sincos": "peaks around 0.5-0.6 by layers 1-2, then declines",
    "rope": "rises gradually to about 0.35",
    "none": "stays near 0",
    "rpt": "stays near 0",
}

# Follow-up on pretrained ImageNet-1k ViT-B models: SSDC under RPI.
PRETRAINED_VIT_B_SSDC_RPI: dict[str, dict[str, Any]] = {
    "ape": {"peak": 0.66, "peak_blocks": (2, 3), "last": 0.13},
    "rope": {"peak": 0.39, "peak_blocks": (5,), "last": 0.23},
}
