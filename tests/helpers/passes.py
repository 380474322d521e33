"""One pass of a wrapped model under an intervention, as the backends' tests run it, and the identity-hook check
they share, and the ``pe_zero`` oracle against zeroed tables (any backend: peanchor's ViT, timm, transformers)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


def assert_pe_zero_is_the_library_with_zeroed_tables(model: Any, x: torch.Tensor, zero_tables: Callable[[], None],
                                                     own: Callable[[], torch.Tensor]) -> None:  # fmt: skip
    """``pe_zero`` changes the logits, and equals the library's own forward (``own()``) once ``zero_tables()`` has
    zeroed the model's PE tables in place, to 1e-5."""
    zeroed = logits(model, x, "pe_zero")
    assert not torch.allclose(zeroed, logits(model, x), atol=1e-3)
    zero_tables()
    with torch.no_grad():
        torch.testing.assert_close(zeroed, own(), rtol=0, atol=1e-5)


def assert_alpha_is_the_library_with_scaled_tables(model: Any, x: torch.Tensor,
                                                   scale_tables: Callable[[float], None],
                                                   own: Callable[[], torch.Tensor]) -> None:  # fmt: skip
    """α = 0 is ``pe_zero``, and α = 0.5 equals the library's own forward (``own()``) once ``scale_tables(0.5)`` has
    scaled the model's PE tables in place, to 1e-5."""
    at_half, at_zero = logits(model, x, alpha=0.5), logits(model, x, alpha=0.0)
    torch.testing.assert_close(at_zero, logits(model, x, "pe_zero"), rtol=0, atol=1e-5)
    scale_tables(0.5)
    with torch.no_grad():
        torch.testing.assert_close(at_half, own(), rtol=0, atol=1e-5)


def assert_logits_and_tokens_are_the_librarys(model: Any, x: torch.Tensor, norms: Iterable[torch.nn.Module],
                                               prefix: int, own: Callable[[], torch.Tensor]) -> None:  # fmt: skip
    """The plain pass's logits equal the library's own forward (``own()``), and its tokens what each block's first
    norm (``norms``) gives there, prefix tokens dropped, to 1e-5."""
    seen: list[torch.Tensor] = []
    handles = [n.register_forward_hook(lambda m, i, out: seen.append(out[:, prefix:])) for n in norms]
    try:
        with torch.no_grad():
            expected = own()
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        out = model.forward_intermediates(x)
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.tokens, torch.stack(seen, dim=1), rtol=0, atol=1e-5)
