"""The record of the analysis at other resolutions (``analysis.resolutions``, docs/analysis.md): a
:class:`ResolutionSweep` of :class:`ResolutionPoint`\\ s, the optional ``resolution`` of ``analysis.json`` and of each
model of ``results.json`` (absent from files written without it, or before it existed).

Each point is top-1 on the evaluation images resized to one size, the positional encoding moved to that patch grid
by its own convention, with its interval and A(size)/A(native) with its paired interval, both from the analysis's
groups bootstrap. The native size is always one of the points: the main analysis's clean accuracy itself.

Imports: :mod:`peanchor.core.fileio` (``Number``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from peanchor.core.fileio import Number

__all__ = ["ResolutionPoint", "ResolutionSweep"]


_OMIT = {"omit_if_none": True}  # absent from the file when not measured, as results.py's optional parts


@dataclass(kw_only=True)
class ResolutionPoint:
    """Top-1 at one image size, and relative to the native size's."""

    size: int  # the images' side in px
    grid: list[int]  # the patch grid the model ran at
    acc: Number
    relative: Number  # acc / the native size's acc (NaN where that is not above chance: relative_undefined)
    acc_ci: list[Number] | None = field(default=None, metadata=_OMIT)  # [low, high], the analysis's groups bootstrap
    # paired: both accuracies' replicates from the same resample of the images
    relative_ci: list[Number] | None = field(default=None, metadata=_OMIT)
    relative_undefined: str | None = field(default=None, metadata=_OMIT)  # why relative is NaN


@dataclass(kw_only=True)
class ResolutionSweep:
    """Top-1 at every size of ``analysis.resolutions`` and at the native one, ascending."""

    native: int  # the size the model was trained and analysed at, px
    coordinates: str  # how the PE's coordinates moved: "extrapolate" or "interpolate" (its declaration's other_grids)
    table_mode: str  # how an absolute table was resampled (pe_resample's mode, antialiased)
    resize: str  # how the images were resized
    points: list[ResolutionPoint]
    not_measured: str | None = field(default=None, metadata=_OMIT)  # why only the native size was measured

    def point(self, size: int) -> ResolutionPoint | None:
        """The point at ``size`` px, or None where it was not measured."""
        return next((p for p in self.points if p.size == size), None)
