"""What the audit measures of an adapter beside the analysis interface: how far a library's own interpolation path
(timm's ``dynamic_img_size``, transformers' ``interpolate_pos_encoding``) is from ``pe_resample`` at the documented
mode on a non-square grid. The backends (:mod:`peanchor.adapters.backend`) build their audit subjects with it.

Imports: torch; :mod:`peanchor.interventions` (pe_resample).
"""

from __future__ import annotations

from typing import Any

import torch

from peanchor.audit.probes import max_diff, random_images
from peanchor.audit.subject import AuditSubject
from peanchor.interventions import Intervention

__all__ = ["own_path"]


def own_path(subject: AuditSubject, forward: Any, mode: str, antialias: bool) -> float:
    """How far the model's own interpolation (``forward`` on images of another grid) is from ``pe_resample`` at
    ``mode``: the largest relative logit gap at two non-square grids, rows x (cols + 2) (upsampled) and
    (rows - 1) x cols (downsampled, where antialiasing matters)."""
    rows, cols = subject.grid
    gap = 0.0
    for grid in ((rows, cols + 2), (rows - 1, cols)) if rows > 2 else ((rows, cols + 2),):
        images = random_images(2, subject.size(grid))
        spec = f"pe_resample:grid={grid[0]}x{grid[1]},mode={mode},antialias={str(antialias).lower()}"
        with torch.no_grad():
            ours = subject.model.forward_intermediates(images, Intervention.parse(spec)).logits
            gap = max(gap, max_diff(forward(images), ours))
    return gap
