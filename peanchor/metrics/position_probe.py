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

With ``groups=G`` the held-out sums are also kept per group of images (``index % G``,
:mod:`peanchor.metrics.bootstrap`), ``O(G·L·D²)``, so that :meth:`PositionProbeAccumulator.replicates` gives the
held-out R² on any resampling of the groups: the probe fitted once on the fit images, its score resampled. The
interval therefore covers the held-out images' sampling, not the fit's.

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

    Examples:
        >>> acc = PositionProbeAccumulator((2, 2))
        >>> acc.update(torch.randn(6, 3, 4, 8), torch.tensor([0, 1, 0, 1, 0, 1], dtype=torch.bool))
        >>> acc.compute().shape
        torch.Size([3, 2])
    """

    def __init__(self, grid: tuple[int, int], ridge: float = DEFAULT_RIDGE, groups: int = 0) -> None:
        rows, cols = grid
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (rows, cols)):
            raise ValueError(f"grid must be a pair (H, W) of positive ints, got {grid!r}")
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge > 0:
            raise ValueError(f"ridge must be a number > 0, got {ridge!r}")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 0:
            raise ValueError(f"groups must be a non-negative int, got {groups!r}")
        self.grid, self.ridge, self.groups = (rows, cols), float(ridge), groups
        self.reset()

    def reset(self) -> None:
        """Forget every image."""
        self._targets = slot_coordinates(self.grid)  # (N, 2)
        self._shift: Tensor | None = None  # (L, D) float64
        self._images = [0, 0]  # fit, held-out
        self._sx: Tensor | None = None  # (2, L, D)
        self._sxx: Tensor | None = None  # (2, L, D, D)
        self._sxy: Tensor | None = None  # (2, L, D, 2)
        self._grouped: list[Tensor] | None = None  # with groups, the held-out sums per group: x (G, L, D),
        # xxᵀ (G, L, D, D), xyᵀ (G, L, D, 2), images (G,)
        self.solver: str | None = None  # which of peanchor.metrics.linalg.SOLVERS the last compute() used

    @property
    def num_images(self) -> tuple[int, int]:
        """Images seen: (fit, held-out)."""
        return self._images[0], self._images[1]

    def update(self, tokens: Tensor, heldout: Tensor, index: Tensor | None = None) -> None:
        """Add a batch: ``tokens (B, L, N, D)``, ``heldout (B,)`` bool, and with groups the images' indices in the
        evaluation set ``index (B,)`` (default: the images in the order they come)."""
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
        group = None
        if self.groups:
            start = sum(self._images)
            index = torch.arange(start, start + b) if index is None else torch.as_tensor(index, dtype=torch.int64).cpu()
            group = index.remainder(self.groups)  # (B,)
        if self._shift is None:
            f64 = dict(dtype=torch.float64, device=tokens.device)
            self._shift = tokens[0].to(torch.float64).mean(dim=1)  # (L, D): the first image's mean token
            self._sx = torch.zeros(2, layers, d, **f64)
            self._sxx = torch.zeros(2, layers, d, d, **f64)
            self._sxy = torch.zeros(2, layers, d, 2, **f64)
            self._targets = self._targets.to(tokens.device)
            if self.groups:
                g = self.groups
                self._grouped = [torch.zeros(g, layers, d, **f64), torch.zeros(g, layers, d, d, **f64),
                                 torch.zeros(g, layers, d, 2, **f64), torch.zeros(g, dtype=torch.float64)]  # fmt: skip
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
                if split == 1 and self._grouped is not None:  # per image, into its group and the total
                    self._add_to_groups(layer, x, targets, group[index.cpu()].to(tokens.device))  # type: ignore[index]
                    continue
                flat = x.view(-1, d)  # (b'·N, D)
                per_slot = x.sum(dim=0)  # (N, D)
                self._sx[split, layer] += per_slot.sum(dim=0).to(torch.float64)  # shifted values: no cancellation
                self._sxx[split, layer] += (flat.T @ flat).to(torch.float64)  # (D, D)
                self._sxy[split, layer] += (per_slot.T @ targets).to(torch.float64)  # (D, 2)
        for split, chosen in splits:
            self._images[split] += chosen.numel()
        if self._grouped is not None:
            self._grouped[3].index_add_(0, group[heldout].to(self._grouped[3].device),
                                        torch.ones(int(heldout.sum()), dtype=torch.float64, device=self._grouped[3].device))

    def _add_to_groups(self, layer: int, x: Tensor, targets: Tensor, group: Tensor) -> None:
        """The held-out images' sums (``x`` ``(b', N, D)``, shifted) added group by group into their group's and into
        the held-out totals: one product per group present, the same multiplications as the totals' one product."""
        assert self._grouped is not None and self._sx is not None and self._sxx is not None and self._sxy is not None
        gx, gxx, gxy, _ = self._grouped
        order = torch.argsort(group, stable=True)
        present, counts = torch.unique_consecutive(group[order], return_counts=True)
        start = 0
        for g, c in zip(present.tolist(), counts.tolist()):
            members = x.index_select(0, order[start : start + c])  # (c, N, D)
            start += c
            flat = members.reshape(-1, members.shape[-1])  # (c·N, D)
            per_slot = members.sum(dim=0)  # (N, D)
            sums = per_slot.sum(dim=0).to(torch.float64)  # (D,)
            products = (flat.T @ flat).to(torch.float64)  # (D, D)
            crossed = (per_slot.T @ targets).to(torch.float64)  # (D, 2)
            gx[g, layer] += sums
            gxx[g, layer] += products
            gxy[g, layer] += crossed
            self._sx[1, layer] += sums
            self._sxx[1, layer] += products
            self._sxy[1, layer] += crossed

    def merge(self, other: PositionProbeAccumulator) -> None:
        """Add the images ``other`` has seen, fit and held-out alike (a shard of the same evaluation set): afterwards
        :meth:`compute` is that of both shards together. The other's sums are moved onto this one's shift first:
        with ``d`` the difference of the shifts and ``n`` the other's tokens per split, ``Σ(x - s) = Σ(x - s') + n d``,
        and likewise for the products."""
        if (other.grid, other.ridge) != (self.grid, self.ridge):
            raise ValueError("merge needs accumulators of the same grid and ridge")
        if self.groups or other.groups:
            raise ValueError("merge of accumulators with groups is not supported (their shifts differ)")
        if other._shift is None:
            return
        assert other._sx is not None and other._sxx is not None and other._sxy is not None
        if self._shift is None:
            self._shift, self._targets = other._shift.clone(), other._targets.clone()
            self._sx, self._sxx, self._sxy = other._sx.clone(), other._sxx.clone(), other._sxy.clone()
            self._images = list(other._images)
            return
        assert self._sx is not None and self._sxx is not None and self._sxy is not None
        if other._shift.shape != self._shift.shape:
            raise ValueError(f"the other accumulator has (L, D) = {tuple(other._shift.shape)}, this one "
                             f"{tuple(self._shift.shape)}")  # fmt: skip
        d = (other._shift.to(self._shift.device) - self._shift)  # (L, D)
        n_slots = self._targets.shape[0]
        slot_sum = self._targets.to(torch.float64).sum(dim=0)  # (2,): Σ y over one image's slots
        for split in (0, 1):
            n = other._images[split] * n_slots  # tokens
            sx = other._sx[split].to(self._sx.device)  # (L, D), shifted by the other's shift
            self._sx[split] += sx + n * d
            self._sxx[split] += (other._sxx[split].to(self._sxx.device) + sx[:, :, None] * d[:, None, :]
                                 + d[:, :, None] * sx[:, None, :] + n * d[:, :, None] * d[:, None, :])  # fmt: skip
            self._sxy[split] += other._sxy[split].to(self._sxy.device) + other._images[split] * d[:, :, None] * slot_sum
            self._images[split] += other._images[split]

    def compute(self) -> Tensor:
        """Held-out R² per layer and target (row, col): float64 CPU ``(L, 2)``.

        A target with no spread on the held-out tokens (a grid of one row or one column) gives NaN.
        """
        if self._sx is None or 0 in self._images:
            raise ValueError(f"PositionProbeAccumulator needs fit and held-out images; got {self.num_images}")
        assert self._sxx is not None and self._sxy is not None
        weights, intercept = self._fit()
        terms = self._score_terms(self._sx[1].cpu(), self._sxx[1].cpu(), self._sxy[1].cpu(), weights, intercept)
        return _r2(terms, intercept, self._images[1] * self._targets.shape[0], self._targets.cpu())

    def _fit(self) -> tuple[Tensor, Tensor]:
        """The ridge probe on the fit images' sums: weights ``(L, D, 2)`` and intercept ``(L, 2)`` (on the shifted
        features)."""
        assert self._sx is not None and self._sxx is not None and self._sxy is not None
        n = self._targets.shape[0]
        y = self._targets.cpu()  # (N, 2)
        sx, sxx, sxy = self._sx[0].cpu(), self._sxx[0].cpu(), self._sxy[0].cpu()
        # Fit: centred moments of the fit tokens.
        m = self._images[0] * n
        mu, ybar = sx / m, y.mean(dim=0)  # (L, D), (2,)
        cov = sxx / m - mu[:, :, None] * mu[:, None, :]  # (L, D, D)
        cross = sxy / m - mu[:, :, None] * ybar  # (L, D, 2)
        d = cov.shape[-1]
        trace = cov.diagonal(dim1=-2, dim2=-1).sum(dim=-1).clamp_min(torch.finfo(torch.float64).tiny)  # (L,)
        penalty = (self.ridge * trace / d)[:, None, None] * torch.eye(d, dtype=torch.float64)  # (L, D, D)
        # The normal equations are symmetric positive definite: Cholesky (batched LU is not safe in workers).
        weights, self.solver = solve_spd(cov + penalty, cross)  # (L, D, 2)
        intercept = ybar - (weights * mu[:, :, None]).sum(dim=1)  # (L, 2)
        return weights, intercept

    @staticmethod
    def _score_terms(sx: Tensor, sxx: Tensor, sxy: Tensor, weights: Tensor, intercept: Tensor) -> Tensor:
        """The parts of the held-out SSE that depend on the tokens, ``Σ(wᵀx)² − 2Σ y wᵀx + 2 b Σ wᵀx``, ``(..., L, 2)``,
        from held-out sums with any leading dimensions (``sx (..., L, D)``, ...); the target-only terms follow from
        the image count (:func:`_r2`)."""
        fitted = (weights * (sxx @ weights)).sum(dim=-2)  # (..., L, 2): Σ (wᵀx)²
        crossed = (weights * sxy).sum(dim=-2)  # (..., L, 2): Σ y wᵀx
        linear = (weights * sx[..., None]).sum(dim=-2)  # (..., L, 2): Σ wᵀx
        return fitted - 2 * crossed + 2 * intercept * linear

    def replicates(self, counts: Tensor) -> Tensor:
        """The held-out R² on every resampling of the groups, ``(R, L, 2)`` float64 (the probe fitted once): replicate
        ``r`` weighs group ``g``'s held-out sums by ``counts[r, g]``. Needs ``groups``."""
        if self._grouped is None or 0 in self._images:
            raise ValueError("replicates() needs PositionProbeAccumulator(..., groups=G) with fit and held-out images")
        weights, intercept = self._fit()
        gx, gxx, gxy, images = (t.cpu() for t in self._grouped)
        per_group = self._score_terms(gx, gxx, gxy, weights, intercept)  # (G, L, 2)
        c = counts.to(torch.float64)  # (R, G)
        terms = torch.einsum("rg,glk->rlk", c, per_group)  # (R, L, 2)
        held = c @ images  # (R,) held-out images per replicate
        y = self._targets.cpu()
        return _r2(terms, intercept, held * y.shape[0], y)  # (R, L, 2): every replicate at once


def _r2(token_terms: Tensor, intercept: Tensor, k: float | Tensor, y: Tensor) -> Tensor:
    """Held-out R² ``(..., L, 2)`` from the token terms of the SSE ``(..., L, 2)``
    (:meth:`PositionProbeAccumulator._score_terms`), ``k`` held-out tokens (a number, or one per leading index
    ``(...)``) and the slot targets ``y (N, 2)`` (every held-out image has every slot once). No held-out token: NaN."""
    k = torch.as_tensor(k, dtype=torch.float64)[..., None, None]  # (..., 1, 1)
    h = k / y.shape[0]
    sy, syy = h * y.sum(dim=0), h * (y**2).sum(dim=0)  # (..., 1, 2) each
    sse = syy - 2 * intercept * sy + token_terms + k * intercept**2
    sst = syy - sy**2 / k  # (..., 1, 2)
    r2 = 1 - sse.clamp_min(0) / sst
    return torch.where((sst > 0) & (k > 0), r2, torch.full_like(r2, float("nan")))
