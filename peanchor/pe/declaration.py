"""What a positional encoding declares about itself, for the audit and the docs: :class:`PEDeclaration`.

A PE class sets ``declares = PEDeclaration(...)`` in its own file. The audit (``peanchor audit``) checks a model
against what its PE declares rather than against a list of built-in names, so a plug-in PE is audited by what it
says of itself; a PE that declares nothing (``declares = None``) gets "n/a: the PE declares nothing to check".

Imports: nothing from peanchor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["OtherGrids", "PEDeclaration", "PEKind", "PrefixHandling"]

#: How position enters the model: added to the tokens (``absolute``), rotating q and k (``rotary``), a bias on the
#: attention logits (``bias``), computed from the tokens between blocks (``conditional``), or not at all (``none``).
PEKind = Literal["none", "absolute", "rotary", "bias", "conditional"]
#: Which prefix (CLS, register) tokens get a position: none, a zero code, or a code of their own.
PrefixHandling = Literal["none", "zero", "own"]
#: How the PE's coordinates move to another patch grid (``pe_resample``'s ``rope_positions``): kept as integer
#: patch indices, the new grid running past the trained one (``extrapolate``), or the new grid's patch centres
#: mapped onto the trained span, i.e. coordinates normalised to the image (``interpolate``).
OtherGrids = Literal["extrapolate", "interpolate"]


@dataclass(frozen=True)
class PEDeclaration:
    """What a positional encoding promises, in the terms the audit checks.

    ``kinds``: every way position enters (``("absolute", "rotary")`` for RoPE + APE). ``layout``: how the code is laid
    out, in the family's own words (a rotary PE: ``"half"``, ``"interleaved"`` or ``"matrix"`` for a general
    rotation; an absolute one: ``"table"``, ``"function"`` or ``"factorized"``); None where nothing is to say.
    ``prefix``: what the prefix tokens get. ``relative``: whether the attention logit between two patch tokens
    depends only on the offset between their positions. ``alpha``: what the PE scale α scales (None: α does not
    apply to this PE). ``pe_zero``: what the ``pe_zero`` edit removes. ``params``: facts the audit can compare
    with the model's own code (a rotary base, the frequencies' count), as plain JSON values. ``other_grids``: how the
    coordinates of its rotation, bias or function move to another patch grid, the family's own convention (the
    resolution analysis reads it; a table is resampled whatever it says).

    >>> PEDeclaration(kinds=("rotary",), layout="half", relative=True, alpha="the rotation angles",
    ...               pe_zero="the rotation (angles 0)").kinds
    ('rotary',)
    """

    kinds: tuple[PEKind, ...]
    layout: str | None = None
    prefix: PrefixHandling = "none"
    relative: bool = False
    alpha: str | None = None
    pe_zero: str = "nothing: the model has no positional encoding"
    params: tuple[tuple[str, float | int | str | bool], ...] = ()
    other_grids: OtherGrids = "extrapolate"

    def __post_init__(self) -> None:
        if not self.kinds:
            raise ValueError("PEDeclaration needs at least one kind ('none' for a model without a PE)")
        if "none" in self.kinds and len(self.kinds) > 1:
            raise ValueError(f"'none' excludes every other kind, got {self.kinds}")

    @property
    def param(self) -> dict[str, float | int | str | bool]:
        """``params`` as a dict."""
        return dict(self.params)
