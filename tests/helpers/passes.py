"""One pass of a wrapped model under an intervention, as the backends' tests run it, and the identity-hook check
they share (any backend: peanchor's ViT, timm, transformers)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from peanchor.interventions import Hook, Intervention


def logits(model: Any, x: torch.Tensor, spec: str = "", perm: torch.Tensor | None = None,
           alpha: float = 1.0) -> torch.Tensor:  # fmt: skip
    """``model``'s logits on ``x`` under the edit ``spec`` (text; "" for none), the token order ``perm`` and α."""
    iv = Intervention.parse(spec, token_perm=perm, pe_scale=alpha) if spec else Intervention(perm, alpha)
    with torch.no_grad():
        return model.forward_intermediates(x, iv).logits


def assert_identity_hooks_are_plain(model: Any, x: torch.Tensor, points: Iterable[str]) -> None:
    """An identity ``Hook`` at each of ``points`` gives the plain pass's logits bit for bit."""
    plain = logits(model, x)
    for point in points:
        with torch.no_grad():
            hooked = model.forward_intermediates(x, Intervention().with_edits(Hook(point, lambda t: t))).logits
        assert torch.equal(hooked, plain), point
