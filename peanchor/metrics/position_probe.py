"""A linear position-decoding probe per layer: ridge regression from a token to its grid (row, col), fitted on
one set of images and scored (held-out R²) on another, streaming.

For each layer, every patch token ``x`` (``D`` channels) of a *fit* image is a sample with target ``y`` = the
(row, col) of its slot on the grid. The probe is ridge regression with an unpenalised intercept: on centred
features, ``W = (C + λI)⁻¹ C_xy`` with ``C`` the feature covariance and ``C_xy`` the feature-target covariance
of the fit tokens, and ``λ = ridge · trace(C) / D`` (``ridge`` times the mean feature variance, so the penalty
does not depend on the tokens' scale). ``C + λI`` is symmetric positive definite, and is solved as such (Cholesky,
:func:`peanchor.metrics.linalg.solve_spd`, which says in ``solver`` when it had to fall back). It is scored on the tokens of the *held-out* images: for row and column
separately, ``R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)²`` with ``ȳ`` the held-out mean (as ``sklearn.metrics.r2_score``).
1 means the layer gives away every token's position linearly; 0 means no better than the mean position; it can
be negative (worse than the mean) on held-out images.

Nothing but sums is kept: per layer and split, ``Σx``, ``Σxxᵀ`` and ``Σxyᵀ`` (the targets are the same slots in
every image, so their sums follow from the image count). The fit and the held-out score come from those sums
exactly, in O(L·D²) memory, whatever the number of images. Features are shifted by the first image's mean
token per layer before they are summed, which keeps the covariance from cancelling in float32; R² does not
change.

Under RPI the target is the slot, as for SSDC: the probe asks whether a layer knows where its *slot* is, not
where the content came from.

Imports: torch; :mod:`peanchor.metrics` (linalg: the solve).
"""

from __future__ import annotations

import torch
from torch import Tensor

from peanchor.metrics.linalg import solve_spd

__all__ = ["DEFAULT_HOLDOUT", "DEFAULT_RIDGE", "PositionProbeAccumulator", "heldout_mask", "slot_coordinates"]

DEFAULT_RIDGE = 1e-3
DEFAULT_HOLDOUT = 0.5
TARGETS: tuple[str, ...] = ("row", "col")


def slot_coordinates(grid: tuple[int, int]) -> Tensor:
    """``(N, 2)`` float64: the (row, col) of every slot, row-major.

    >>> slot_coordinates((2, 3)).tolist()
    [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]
    """
    rows, cols = grid
    t = torch.arange(rows * cols)
    return torch.stack([t // cols, t % cols], dim=-1).to(torch.float64)


def heldout_mask(num_images: int, fraction: float = DEFAULT_HOLDOUT, seed: int = 0) -> Tensor:
    """Which images are held out: a bool ``(num_images,)`` with ``round(fraction · n)`` (at least 1, at most
    ``n − 1``) True, drawn by ``torch.randperm`` from a generator seeded with ``seed``.

    >>> heldout_mask(10, 0.3, seed=0).sum().item()
    3
    """
    if num_images < 2:
        raise ValueError(f"a held-out split needs at least 2 images, got {num_images}")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction!r}")
    k = min(max(round(fraction * num_images), 1), num_images - 1)
    order = torch.randperm(num_images, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(num_images, dtype=torch.bool)
    mask[order[:k]] = True
    return mask


class PositionProbeAccumulator:
    """Held-out R² of a ridge probe from tokens to their (row, col), per layer, over streamed batches.

    ``update(tokens (B, L, N, D), heldout (B,) bool)`` adds a batch (``heldout`` says which images are scored
    rather than fitted; see :func:`heldout_mask`); :meth:`compute` fits on the fit images and returns the R²
    ``(L, 2)`` (row, col) on the held-out ones. Sums are float64 on the device of the first batch; the products
    of a batch are taken in float32 (float64 for float64 tokens).

    >>> acc = PositionProbeAccumulator((2, 2))
    >>> acc.update(torch.randn(6, 3, 4, 8), torch.tensor([0, 1, 0, 1, 0, 1], dtype=torch.bool))
    >>> acc.compute().shape
    torch.Size([3, 2])
    """

    def __init__(self, grid: tuple[int, int], ridge: float = DEFAULT_RIDGE) -> None:
        rows, cols = grid
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (rows, cols)):
            raise ValueError(f"grid must be a pair (H, W) of positive ints, got {grid!r}")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge > 0:
            raise ValueError(f"ridge must be a number > 0, got {ridge!r}")
        self.grid, self.ridge = (rows, cols), float(ridge)
        self._targets = slot_coordinates(self.grid)  # (N, 2)
        self._shift: Tensor | None = None  # (L, D) float64
        self._images = [0, 0]  # fit, held-out
        self._sx: Tensor | None = None  # (2, L, D)
        self._sxx: Tensor | None = None  # (2, L, D, D)
        self._sxy: Tensor | None = None  # (2, L, D, 2)
        self.solver: str | None = None  # which of peanchor.metrics.linalg.SOLVERS the last compute() used

    @property
    def num_images(self) -> tuple[int, int]:
        """Images seen: (fit, held-out)."""
        return self._images[0], self._images[1]

    def update(self, tokens: Tensor, heldout: Tensor) -> None:
        if not isinstance(tokens, Tensor) or tokens.dim() != 4 or not tokens.is_floating_point():
            raise ValueError("tokens must be a floating-point tensor (B, L, N, D)")
        b, layers, n, d = tokens.shape
        if n != self._targets.shape[0]:
            rows, cols = self.grid
            raise ValueError(f"tokens have N={n} but the grid {rows}x{cols} has {rows * cols} positions")
        heldout = torch.as_tensor(heldout, dtype=torch.bool).cpu()  # the split is read on the host: no device sync
        if heldout.shape != (b,):
            raise ValueError(f"heldout must be a bool tensor (B,) = ({b},), got {tuple(heldout.shape)}")
        dtype = torch.float64 if tokens.dtype == torch.float64 else torch.float32
        if self._shift is None:
            f64 = dict(dtype=torch.float64, device=tokens.device)
            self._shift = tokens[0].to(torch.float64).mean(dim=1)  # (L, D): the first image's mean token
            self._sx = torch.zeros(2, layers, d, **f64)
            self._sxx = torch.zeros(2, layers, d, d, **f64)
            self._sxy = torch.zeros(2, layers, d, 2, **f64)
            self._targets = self._targets.to(tokens.device)
        elif self._shift.shape != (layers, d) or self._shift.device != tokens.device:
            raise ValueError(f"tokens (L={layers}, D={d}, {tokens.device}) do not match earlier batches "
                             f"(L={self._shift.shape[0]}, D={self._shift.shape[1]}, {self._shift.device})")  # fmt: skip
        assert self._sx is not None and self._sxx is not None and self._sxy is not None
        targets = self._targets.to(dtype)  # (N, 2)
        # Each split's images, by index: one gathering copy per layer, then everything in place.
        splits = [(split, select.nonzero().squeeze(1)) for split, select in enumerate((~heldout, heldout))]
        splits = [(split, index.to(tokens.device, non_blocking=True)) for split, index in splits if index.numel()]
        for layer in range(layers):
            shift = self._shift[layer].to(dtype)  # (D,)
            for split, index in splits:
                x = tokens[:, layer].index_select(0, index).to(dtype).sub_(shift)  # (b', N, D), shifted
                flat = x.view(-1, d)  # (b'·N, D)
                per_slot = x.sum(dim=0)  # (N, D)
                self._sx[split, layer] += per_slot.sum(dim=0).to(torch.float64)  # shifted values: no cancellation
                self._sxx[split, layer] += (flat.T @ flat).to(torch.float64)  # (D, D)
                self._sxy[split, layer] += (per_slot.T @ targets).to(torch.float64)  # (D, 2)
        for split, index in splits:
            self._images[split] += index.numel()

    def compute(self) -> Tensor:
        """Held-out R² per layer and target (row, col): float64 CPU ``(L, 2)``.

        A target with no spread on the held-out tokens (a grid of one row or one column) gives NaN.
        """
        if self._sx is None or 0 in self._images:
            raise ValueError(f"PositionProbeAccumulator needs fit and held-out images; got {self.num_images}")
        assert self._sxx is not None and self._sxy is not None
        n = self._targets.shape[0]
        y = self._targets.cpu()  # (N, 2)
        sx, sxx, sxy = self._sx.cpu(), self._sxx.cpu(), self._sxy.cpu()
        # Fit: centred moments of the fit tokens.
        m = self._images[0] * n
        mu, ybar = sx[0] / m, y.mean(dim=0)  # (L, D), (2,)
        cov = sxx[0] / m - mu[:, :, None] * mu[:, None, :]  # (L, D, D)
        cross = sxy[0] / m - mu[:, :, None] * ybar  # (L, D, 2)
        d = cov.shape[-1]
        trace = cov.diagonal(dim1=-2, dim2=-1).sum(dim=-1).clamp_min(torch.finfo(torch.float64).tiny)  # (L,)
        penalty = (self.ridge * trace / d)[:, None, None] * torch.eye(d, dtype=torch.float64)  # (L, D, D)
        # The normal equations are symmetric positive definite: Cholesky (batched LU is not safe in workers).
        weights, self.solver = solve_spd(cov + penalty, cross)  # (L, D, 2)
        intercept = ybar - (weights * mu[:, :, None]).sum(dim=1)  # (L, 2)
        # Score: the held-out residuals, expanded in the held-out sums.
        h = self._images[1]
        k = h * n
        sy, syy = h * y.sum(dim=0), h * (y**2).sum(dim=0)  # (2,), (2,)
        fitted = (weights * (sxx[1] @ weights)).sum(dim=1)  # (L, 2): Σ (wᵀx)²
        crossed = (weights * sxy[1]).sum(dim=1)  # (L, 2): Σ y wᵀx
        linear = (weights * sx[1][:, :, None]).sum(dim=1)  # (L, 2): Σ wᵀx
        sse = syy - 2 * crossed - 2 * intercept * sy + fitted + 2 * intercept * linear + k * intercept**2
        sst = syy - sy**2 / k  # (2,)
        r2 = 1 - sse.clamp_min(0) / sst
        return torch.where(sst > 0, r2, torch.full_like(r2, float("nan")))
