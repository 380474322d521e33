""":class:`Shift`: one kind with its parameters, a frozen, hashable, JSON-describable corruption of uint8 batches.

Imports: :mod:`peanchor.analysis.shifts.registry`, :mod:`peanchor.core.errors`; torch and
:mod:`peanchor.analysis.corrupted_sets` (the batch check) only when a shift is applied.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any

from peanchor.analysis.shifts.registry import KINDS, get_kind
from peanchor.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["Shift"]


class Shift:
    """A deterministic corruption of uint8 image batches ``(B, C, H, W)``, after the evaluation resize and before
    normalisation.

    Build one with the kind and its parameters, e.g. ``Shift("jpeg", quality=58)``, ``Shift("blur", sigma=0.7)``,
    ``Shift("gaussian_noise", sigma=0.08, seed=0)``, ``Shift("pixelate", factor=0.6)``; the kinds and their
    parameters are the registry's (:mod:`peanchor.analysis.shifts.registry`). Parameters are read as attributes
    (``s.quality``; a parameter of another kind reads ``None``); parameters that do not belong to the kind are
    refused. A blur without ``kernel_size`` picks its kernel for the image it is applied to; :meth:`resolved` fixes
    it in advance so that :meth:`describe` records the kernel actually used.

    Examples:
        >>> s = Shift("jpeg", quality=58)
        >>> s.name, s.describe()
        ('jpeg_q58', {'kind': 'jpeg', 'quality': 58})
        >>> Shift.from_dict(s.describe()) == s, s.sigma
        (True, None)
        >>> import torch
        >>> Shift("blur", kernel_size=5, sigma=2.5)(torch.zeros(2, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([2, 3, 32, 32])
    """

    __slots__ = ("kind", "_values")
    kind: str
    _values: tuple[tuple[str, Any], ...]

    def __init__(self, kind: str, **params: Any) -> None:
        values = get_kind(kind).values(params)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "_values", tuple(values.items()))

    # ---- a frozen value ------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not slots: a parameter of this kind, or of another kind (None).
        if name.startswith("_") or not any(name in k.param_names for k in KINDS.values()):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return dict(self._values).get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shift) and (self.kind, self._values) == (other.kind, other._values)

    def __hash__(self) -> int:
        return hash((self.kind, self._values))

    def __repr__(self) -> str:
        return f"Shift({self.kind!r}{''.join(f', {k}={v!r}' for k, v in self._values)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shift.from_dict, (self.describe(),))

    # ---- description ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """A short, file-name-safe label, e.g. ``jpeg_q58``, ``blur_k5_s2.5``, ``pixelate_f0.6``."""
        return get_kind(self.kind).label(dict(self._values))

    def describe(self) -> dict[str, Any]:
        """``{"kind": ..., <its parameters>}``: JSON-able, and :meth:`from_dict` rebuilds the shift."""
        return {"kind": self.kind, **dict(self._values)}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Shift:
        """Rebuild a shift from :meth:`describe` output (e.g. read back from results.json)."""
        if not isinstance(spec, dict) or "kind" not in spec:
            raise ConfigError(f"a shift description needs a 'kind' key, got {spec!r}")
        known = {name for kind in KINDS.values() for name in kind.param_names}
        unknown = set(spec) - {"kind", *known}
        if unknown:
            raise ConfigError(f"unknown shift parameter(s) {', '.join(sorted(unknown))} in {spec!r}")
        return cls(**spec)

    def resolved(self, img_size: int) -> Shift:
        """This shift with every size-dependent default fixed for ``img_size`` px images; parameters too large
        for them are a :class:`ConfigError` (found here, before a long run, rather than at the first batch)."""
        values = get_kind(self.kind).resolve(dict(self._values), img_size)
        return Shift(self.kind, **values)

    # ---- application ---------------------------------------------------------------------------
    def __call__(self, images: torch.Tensor, *, start_index: int = 0) -> torch.Tensor:
        """Corrupt a uint8 batch ``(B, C, H, W)``; returns a new uint8 batch of the same shape.

        ``start_index`` is the dataset index of ``images[0]``; only the noise kinds use it (their noise is seeded
        per image index, so chunking a set does not change the result).
        """
        from peanchor.analysis.corrupted_sets import check_batch

        check_batch(images)
        if images.shape[0] == 0:
            return images.clone()
        return get_kind(self.kind).kernel(images, start_index, **dict(self._values))
