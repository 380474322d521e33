"""One batch under a base intervention and under each dose of a sweep: :func:`forward_doses`.

This is the reference implementation, a loop over ``forward_intermediates``: the pass under ``base`` first (the
plain pass of the sweep, and the donor a ``patch`` dose reads), then one pass per dose. A shared-work engine may
replace the body (the work before the first edited hook point is the same in every pass), provided each output
stays bit for bit the separate call's; :mod:`peanchor.analysis.dose_sweep` calls it once per batch and image set.

Imports: :mod:`peanchor.interventions` (intervention); torch only for type annotations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from peanchor.interventions.intervention import Intervention

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

__all__ = ["forward_doses"]


def forward_doses(model: Any, images: Tensor, base: Intervention, doses: Sequence[Intervention], *,
                  layers: int | None = None, head: bool = True) -> tuple[Any, list[Any]]:  # fmt: skip
    """The pass under ``base`` and one pass per dose; each output equals (bit for bit)
    ``model.forward_intermediates(images, iv, layers=layers, head=head)`` for ``iv`` in ``(base, *doses)``.

    ``images``: normalised ``(B, 3, H, W)``, the same for every pass. Returns the base's
    :class:`~peanchor.models.interface.Intermediates` and the doses', in order.
    """
    plain = model.forward_intermediates(images, base, layers=layers, head=head)
    return plain, [model.forward_intermediates(images, iv, layers=layers, head=head) for iv in doses]
