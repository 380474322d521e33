"""The evaluation suite: geometry (SSDC, ΔSSDC), robustness (accuracy, Fragility Score) and the α sweep.

Everything is measured from as few passes over the evaluation set as possible, and geometry comes
out of the same passes as accuracy:

========================== ============================================================ ==========
pass                       yields                                                       model call
========================== ============================================================ ==========
clean, α = 1               clean top-1 and SSDC per layer (RPI off)                     forward_with_tokens
RPI draw k, α = 1          SSDC per layer under RPI, RPI top-1                          forward_with_tokens
shift s, α = 1             top-1 under each shift (and each severity, on request)       forward
clean / shift s, α ≠ 1     the α sweep's accuracies (RPI off)                           forward
RPI draw k, α ≠ 1          ΔSSDC at α: only probes 0 and 1 are needed                   spatial_tokens(num_layers=2)
========================== ============================================================ ==========

``forward_passes`` in the result counts these model calls over the whole set (a truncated
``num_layers=2`` pass counts as one too; ``passes`` in the result itemises them). Passes that
would repeat an identical computation (a severity equal to a main shift, α = 1 in the sweep) are
reused, not rerun.

RPI draws one permutation of the patch tokens per forward call (i.e. per batch), shared by the
batch, from a ``torch.Generator`` seeded with ``seed + draw``. The same stream is used at every α,
so the sweep compares α values on identical permutations. Because a permutation is drawn per
batch, SSDC under RPI depends (slightly) on ``batch_size``; it is recorded in ``settings``.

Models only need the probe interface of :class:`peanchor.models.VisionTransformer`: ``grid``,
``depth``, ``forward(x, token_perm, pe_scale)``, ``forward_with_tokens(...)`` and
``spatial_tokens(..., num_layers=)``, plus ``pe.scalable`` (or a ``pe_scalable`` attribute) to
say whether α means anything. An adapter around a foreign model (e.g. a timm ViT) can therefore be
evaluated unchanged.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from peanchor import fileio
from peanchor.analysis.corruptions import (
    CorruptedCache,
    Shift,
    fingerprint,
    paper_shifts,
    severity_table,
    table_name,
)
from peanchor.errors import ConfigError, DataError
from peanchor.interventions import random_permutation
from peanchor.metrics import SSDCAccumulator, fragility_score

__all__ = [
    "DEFAULT_ALPHAS",
    "RESULT_KEYS",
    "EvalSet",
    "analysis_is_current",
    "evaluate_model",
    "is_scalable",
    "read_analysis",
    "subset_indices",
    "tidy_rows",
    "write_analysis",
    "write_tidy_csv",
]

ANALYSIS_JSON = "analysis.json"
ANALYSIS_CSV = "analysis.csv"

# The paper's grid (1.0, 0.9, ..., 0.1) plus α = 0 (no positional information at all).
DEFAULT_ALPHAS: tuple[float, ...] = tuple(round(1.0 - 0.1 * i, 1) for i in range(11))

# Keys every result of :func:`evaluate_model` has (optional ones: ssdc.*_ci, severities).
RESULT_KEYS: tuple[str, ...] = (
    "clean_acc", "rpi_acc", "ssdc", "delta_ssdc", "acc", "fragility", "shifts", "alpha_sweep",
    "num_images", "forward_passes", "seconds",
)  # fmt: skip

SEVERITY_KINDS: tuple[str, ...] = ("jpeg", "blur")
CI_LEVEL = 0.95

Probes = Literal["none", "all", "first2"]


# ----------------------------------------------------------------------------------------------
# The evaluation set


def subset_indices(n: int, max_images: int | None, seed: int = 0) -> Tensor:
    """Sorted indices of a deterministic random subset of ``max_images`` out of ``n`` (all if None or >= n).

    Random rather than the first ``max_images``: validation splits are often sorted by class.

    >>> subset_indices(5, None).tolist()
    [0, 1, 2, 3, 4]
    >>> idx = subset_indices(100, 10)
    >>> len(idx), idx.tolist() == sorted(set(idx.tolist())), torch.equal(idx, subset_indices(100, 10))
    (10, True, True)
    """
    if max_images is not None and (isinstance(max_images, bool) or max_images < 1):
        raise ConfigError(f"max_images={max_images!r}: expected a positive integer or None")
    if max_images is None or max_images >= n:
        return torch.arange(n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[:max_images].sort().values


@dataclass
class EvalSet:
    """The evaluation images, loaded once: uint8 ``(N, 3, S, S)`` on the CPU, labels ``(N,)``.

    ``fingerprint`` identifies the exact pixels (it keys the corrupted copies in a
    :class:`~peanchor.analysis.corruptions.CorruptedCache`). ``info`` is the dataset's
    :class:`~peanchor.data.DataInfo` (normalisation statistics, classes).
    """

    images: Tensor  # (N, 3, S, S) uint8
    labels: Tensor  # (N,) int64
    info: Any = None  # peanchor.data.DataInfo
    fingerprint: str = ""
    source: dict[str, Any] = field(default_factory=dict)  # how it was built (JSON-able)

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4 or self.images.shape[1] != 3:
            raise DataError(
                f"evaluation images must be uint8 (N, 3, S, S), got {self.images.dtype} {tuple(self.images.shape)}"
            )
        self.labels = torch.as_tensor(self.labels, dtype=torch.int64)
        if self.labels.shape != self.images.shape[:1]:
            raise DataError(f"{self.images.shape[0]} evaluation images but labels of shape {tuple(self.labels.shape)}")
        if self.images.shape[0] == 0:
            raise DataError("the evaluation set is empty")
        if not self.fingerprint:
            name = getattr(self.info, "name", "") or "eval"
            self.fingerprint = f"{name}-{self.img_size}px-n{len(self)}-{fingerprint(self.images)[:16]}"

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def img_size(self) -> int:
        return int(self.images.shape[-1])

    @classmethod
    def from_tensors(cls, images: Tensor, labels: Tensor, info: Any = None, max_images: int | None = None) -> EvalSet:
        """Wrap tensors already in memory (a deterministic subset with ``max_images``)."""
        idx = subset_indices(int(images.shape[0]), max_images)
        if len(idx) < images.shape[0]:
            images, labels = images[idx], torch.as_tensor(labels)[idx]
        return cls(images.contiguous(), labels, info, source={"max_images": max_images})

    @classmethod
    def from_spec(cls, spec: Any, max_images: int | None = None, *, progress: bool | None = None) -> EvalSet:
        """Load the evaluation split described by a :class:`~peanchor.data.DataSpec` into memory."""
        from peanchor.data import build_eval_dataset

        dataset, info = build_eval_dataset(spec)
        n = len(dataset)
        if n == 0:
            raise DataError(f"the evaluation split of dataset {spec.name!r} is empty")
        idx = subset_indices(n, max_images)
        images, labels = _load_all(dataset, idx, progress)
        source = {"data": spec.to_dict() if hasattr(spec, "to_dict") else str(spec), "max_images": max_images}
        return cls(images, labels, info, source=source)


def _load_all(dataset: Any, idx: Tensor, progress: bool | None) -> tuple[Tensor, Tensor]:
    """Every item of ``dataset`` at ``idx`` as one uint8 tensor ``(N, 3, S, S)`` and labels ``(N,)``."""
    chunk = 512
    if hasattr(dataset, "fetch"):  # array-backed: one vectorised read per chunk
        parts = [dataset.fetch(idx[i : i + chunk].numpy()) for i in range(0, len(idx), chunk)]
        return torch.cat([p[0] for p in parts]), torch.cat([torch.as_tensor(p[1]) for p in parts])
    from torch.utils.data import DataLoader, Subset

    workers = min(8, os.cpu_count() or 1) if len(idx) > 2048 else 0
    loader = DataLoader(Subset(dataset, idx.tolist()), batch_size=chunk, num_workers=workers)
    images, labels = [], []
    for x, y in tqdm(loader, desc="load eval set", unit="batch", disable=_disable(progress), leave=False):
        images.append(x)
        labels.append(torch.as_tensor(y))
    return torch.cat(images), torch.cat(labels)


# ----------------------------------------------------------------------------------------------
# Passes


def is_scalable(model: nn.Module) -> bool:
    """Whether the model's PE responds to ``pe_scale`` (α).

    Read from ``model.pe.scalable`` (peanchor's ViT: the PE class says) or a ``scalable`` /
    ``pe_scalable`` attribute of the model itself (adapters such as the timm wrapper).
    """
    pe = getattr(model, "pe", None)
    if isinstance(pe, nn.Module) and hasattr(pe, "scalable"):
        return bool(pe.scalable)
    for name in ("pe_scalable", "scalable"):
        flag = getattr(model, name, None)
        if isinstance(flag, bool):
            return flag
    return False


def _disable(progress: bool | None) -> bool | None:
    return None if progress is None else not progress


@dataclass(frozen=True)
class _PassSpec:
    images: str  # "clean" or the JSON description of a shift
    alpha: float
    probes: Probes
    rpi_draw: int | None  # None: no permutation

    @property
    def label(self) -> str:
        what = "clean" if self.images == "clean" else Shift.from_dict(json.loads(self.images)).name
        rpi = f", rpi#{self.rpi_draw}" if self.rpi_draw is not None else ""
        probes = {"none": "", "all": ", probes", "first2": ", probes 0-1"}[self.probes]
        return f"{what}, alpha={self.alpha:g}{rpi}{probes}"


@dataclass
class _PassResult:
    correct: int | None = None
    accumulator: SSDCAccumulator | None = None


class _Runner:
    """Runs passes over one evaluation set on one device and counts them."""

    def __init__(
        self,
        model: nn.Module,
        evalset: EvalSet,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        sets: Mapping[str, Tensor],
        batch_size: int,
        device: torch.device,
        seed: int,
        make_accumulator: Any,
        bar: Any,
    ) -> None:
        from peanchor.data import normalize

        self.normalize = normalize
        self.model, self.evalset = model, evalset
        self.mean, self.std = tuple(mean), tuple(std)
        self.sets = dict(sets)  # images key → uint8 (N, 3, S, S), CPU (or already on the device)
        self.batch_size, self.device, self.seed = batch_size, device, seed
        self.make_accumulator = make_accumulator
        self.bar = bar
        self.done: dict[_PassSpec, _PassResult] = {}
        self.labels = evalset.labels.to(device)
        self._on_device: dict[str, Tensor] = {}
        self.first_layers = min(2, int(model.depth))

    def _images(self, key: str) -> Tensor:
        """The set for ``key``; on CUDA moved to the device once, if it fits comfortably."""
        images = self.sets[key]
        if self.device.type != "cuda":
            return images
        if key not in self._on_device:
            free, _ = torch.cuda.mem_get_info(self.device)
            if images.numel() < free // 4:
                self._on_device[key] = images.to(self.device, non_blocking=True)
            else:
                self._on_device[key] = images.pin_memory() if not images.is_pinned() else images
        return self._on_device[key]

    def run(self, spec: _PassSpec) -> _PassResult:
        if spec in self.done:
            return self.done[spec]
        model = self.model
        images = self._images(spec.images)
        n = images.shape[0]
        grid = tuple(model.grid)
        num_patches = grid[0] * grid[1]
        generator = torch.Generator().manual_seed(self.seed + spec.rpi_draw) if spec.rpi_draw is not None else None
        acc = self.make_accumulator() if spec.probes != "none" else None
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            correct = torch.zeros((), dtype=torch.int64, device=self.device)  # summed on the device: no sync per batch
            for start in range(0, n, self.batch_size):
                batch = images[start : start + self.batch_size].to(self.device, non_blocking=True)
                x = self.normalize(batch, self.mean, self.std)  # (B, 3, S, S) float, on the device
                perm = None
                if generator is not None:  # one permutation per forward call, shared by the batch
                    perm = random_permutation(num_patches, generator=generator).to(self.device)  # (N,)
                labels = self.labels[start : start + batch.shape[0]]
                if spec.probes == "all":
                    # (B, C) and (B, L, N, D): accuracy and geometry from the same pass
                    logits, tokens = model.forward_with_tokens(x, token_perm=perm, pe_scale=spec.alpha)
                    acc.update(tokens)
                elif spec.probes == "first2":  # ΔSSDC needs probes 0 and 1 only: stop after block 0
                    tokens = model.spatial_tokens(x, token_perm=perm, pe_scale=spec.alpha, num_layers=self.first_layers)
                    acc.update(tokens)  # (B, 2, N, D)
                    logits = None
                else:
                    logits = model(x, token_perm=perm, pe_scale=spec.alpha)  # (B, C)
                if logits is not None:
                    correct += (logits.argmax(dim=-1) == labels).sum()
                if self.bar is not None:
                    self.bar.update(1)
        result = _PassResult(int(correct.item()) if spec.probes != "first2" else None, acc)
        self.done[spec] = result
        return result

    def accuracy(self, spec: _PassSpec) -> float:
        correct = self.run(spec).correct
        assert correct is not None
        return correct / len(self.evalset)


# ----------------------------------------------------------------------------------------------
# The suite


def _floats(t: Tensor | Sequence[float]) -> list[float]:
    return [float(v) for v in (t.tolist() if isinstance(t, Tensor) else t)]


def _delta(rpi: Sequence[float]) -> float:
    # Exactly rpi[1] - rpi[0] on the stored floats, so readers can check it to the last bit.
    return float(rpi[1]) - float(rpi[0]) if len(rpi) >= 2 else math.nan


def _mean_over_draws(values: list[list[float]]) -> tuple[list[float], list[float]]:
    """Per-layer mean and sample std (ddof=1; 0.0 with a single draw) over RPI draws."""
    arr = np.asarray(values, dtype=np.float64)  # (K, L)
    mean = arr.mean(axis=0)
    std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1])
    return _floats(mean), _floats(std)


def _check_alphas(alphas: Sequence[float] | None) -> list[float]:
    out = []
    for a in DEFAULT_ALPHAS if alphas is None else alphas:
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or a < 0:
            raise ConfigError(f"alpha {a!r}: expected a finite number >= 0 (1 = the PE as trained, 0 = none)")
        if float(a) not in out:
            out.append(float(a))
    return out


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def evaluate_model(
    model: nn.Module,
    evalset: EvalSet,
    info: Any = None,
    *,
    shifts: Mapping[str, Shift] | None = None,
    alphas: Sequence[float] | None = DEFAULT_ALPHAS,
    rpi_draws: int = 1,
    seed: int = 0,
    ssdc_mode: Literal["mean_similarity", "per_image"] = "mean_similarity",
    metric: Literal["manhattan", "euclidean"] = "manhattan",
    bootstrap: int = 0,
    severities: bool = False,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool | None = None,
    cache: CorruptedCache | None = None,
) -> dict[str, Any]:
    """Geometry, robustness and (for scalable PEs) the α sweep of ``model`` on ``evalset``.

    Args:
        model: a ViT with the probe interface (see the module docstring); it is moved to ``device``
            and put in eval mode (its train/eval state is restored afterwards).
        evalset: the images, loaded once.
        info: the dataset's ``DataInfo`` (mean/std for normalisation); default ``evalset.info``.
        shifts: name → :class:`Shift`; default ``paper_shifts(img_size)`` (``"jpeg"``, ``"blur"``).
        alphas: the PE scales of the sweep (default 1.0, 0.9, ..., 0.0); empty or None-like ``()``
            skips it. Ignored (empty sweep) for PEs that are not ``scalable``.
        rpi_draws: independent RPI permutation streams; SSDC under RPI is their mean (± std).
        seed: draw ``k`` uses a generator seeded with ``seed + k``; also seeds the bootstrap.
        ssdc_mode, metric: passed to :class:`SSDCAccumulator` (paper defaults).
        bootstrap: replicates for per-layer confidence intervals over images (0: none).
        severities: also measure the severity 1–5 sweeps of JPEG and blur (α = 1).
        cache: where corrupted sets are memoised; share one across models to corrupt only once.

    Returns:
        A JSON-able dict with :data:`RESULT_KEYS` (see the README, "Results"). ``fragility`` is
        exactly ``1 - acc / clean_acc`` and ``delta_ssdc`` exactly ``rpi[1] - rpi[0]``.
    """
    t0 = time.perf_counter()
    info = info if info is not None else evalset.info
    if info is None:
        raise ConfigError("evaluate_model needs the dataset info (mean/std): pass info= or build the EvalSet with one")
    if rpi_draws < 1:
        raise ConfigError(f"rpi_draws={rpi_draws}: expected >= 1")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size}: expected >= 1")
    if bootstrap < 0:
        raise ConfigError(f"bootstrap={bootstrap}: expected >= 0")
    grid = tuple(int(g) for g in model.grid)
    if evalset.img_size != getattr(info, "img_size", evalset.img_size):
        raise DataError(f"evaluation images are {evalset.img_size} px but the dataset info says {info.img_size} px")
    scalable = is_scalable(model)
    alpha_list = _check_alphas(alphas) if scalable else []
    shifts = dict(paper_shifts(evalset.img_size) if shifts is None else shifts)
    if not shifts:
        raise ConfigError("evaluate_model needs at least one shift")
    severity_shifts = severity_table(evalset.img_size, SEVERITY_KINDS) if severities else {}
    dev = _resolve_device(device)
    cache = cache if cache is not None else CorruptedCache(progress=progress)

    # Corrupt every set once (CPU, memoised in the cache across models and α values).
    def key_of(shift: Shift) -> str:
        return json.dumps(shift.describe(), sort_keys=True)

    t_corrupt = time.perf_counter()
    sets: dict[str, Tensor] = {"clean": evalset.images}
    for shift in [*shifts.values(), *(s for group in severity_shifts.values() for s in group)]:
        if key_of(shift) not in sets:
            sets[key_of(shift)] = cache.get(evalset.images, shift, key=evalset.fingerprint)
    t_corrupt = time.perf_counter() - t_corrupt

    # Plan every pass up front: the progress bar knows its length, and duplicates collapse.
    clean = _PassSpec("clean", 1.0, "all", None)
    rpi = [_PassSpec("clean", 1.0, "all", k) for k in range(rpi_draws)]
    shifted = {name: _PassSpec(key_of(s), 1.0, "none", None) for name, s in shifts.items()}
    severity_passes = {
        kind: [_PassSpec(key_of(s), 1.0, "none", None) for s in group] for kind, group in severity_shifts.items()
    }
    sweep_alphas = [a for a in alpha_list if a != 1.0]
    sweep_passes = {
        a: (
            _PassSpec("clean", a, "none", None),
            {name: _PassSpec(key_of(s), a, "none", None) for name, s in shifts.items()},
            [_PassSpec("clean", a, "first2", k) for k in range(rpi_draws)],
        )
        for a in sweep_alphas
    }
    plan: list[_PassSpec] = [clean, *rpi, *shifted.values(), *(p for g in severity_passes.values() for p in g)]
    for a in sweep_alphas:
        c, s, r = sweep_passes[a]
        plan += [c, *s.values(), *r]
    plan = list(dict.fromkeys(plan))  # unique, in order
    batches_per_pass = math.ceil(len(evalset) / batch_size)

    def make_accumulator() -> SSDCAccumulator:
        return SSDCAccumulator(grid, metric=metric, mode=ssdc_mode, bootstrap=bootstrap, seed=seed)

    was_training = model.training
    model.to(dev).eval()
    t_passes = time.perf_counter()
    try:
        with tqdm(total=len(plan) * batches_per_pass, desc="evaluate", unit="batch", disable=_disable(progress),
                  leave=False) as bar:  # fmt: skip
            runner = _Runner(
                model, evalset, info.mean, info.std, sets=sets, batch_size=batch_size, device=dev, seed=seed,
                make_accumulator=make_accumulator, bar=bar,
            )  # fmt: skip
            for spec in plan:
                bar.set_postfix_str(spec.label, refresh=False)
                runner.run(spec)
    finally:
        model.train(was_training)
    t_passes = time.perf_counter() - t_passes

    # ---- geometry (α = 1)
    normal_acc = runner.run(clean).accumulator
    assert normal_acc is not None
    ssdc_normal = _floats(normal_acc.compute())
    rpi_values = [_floats(runner.run(p).accumulator.compute()) for p in rpi]  # type: ignore[union-attr]
    ssdc_rpi, ssdc_rpi_std = _mean_over_draws(rpi_values)
    ssdc_out: dict[str, Any] = {"normal": ssdc_normal, "rpi": ssdc_rpi, "rpi_std": ssdc_rpi_std}
    if rpi_draws > 1:
        ssdc_out["rpi_draws"] = rpi_values
    if bootstrap:  # [[low per layer], [high per layer]]; under RPI, of the first draw
        for name, accumulator in (("normal_ci", normal_acc), ("rpi_ci", runner.run(rpi[0]).accumulator)):
            low, high = accumulator.confidence_interval(CI_LEVEL)  # type: ignore[union-attr]
            ssdc_out[name] = [_floats(low), _floats(high)]
        ssdc_out["ci_level"] = CI_LEVEL

    # ---- robustness (α = 1)
    clean_acc = runner.accuracy(clean)
    rpi_acc = float(np.mean([runner.accuracy(p) for p in rpi]))
    acc = {name: runner.accuracy(p) for name, p in shifted.items()}
    result: dict[str, Any] = {
        "clean_acc": clean_acc,
        "rpi_acc": rpi_acc,
        "ssdc": ssdc_out,
        "delta_ssdc": _delta(ssdc_rpi),
        "acc": acc,
        "fragility": {name: fragility_score(clean_acc, a) for name, a in acc.items()},
    }
    if severities:  # accuracy (and FS) at severity 1..5, one list per kind
        sev_acc = {kind: [runner.accuracy(p) for p in passes] for kind, passes in severity_passes.items()}
        result["severities"] = sev_acc
        result["severity_fragility"] = {k: [fragility_score(clean_acc, a) for a in v] for k, v in sev_acc.items()}
        result["severity_shifts"] = {k: [s.describe() for s in group] for k, group in severity_shifts.items()}
        result["severity_table"] = table_name(evalset.img_size)
    result["shifts"] = {name: s.describe() for name, s in shifts.items()}

    # ---- α sweep (RPI off for accuracy, on for ΔSSDC); α = 1 is the main result itself
    sweep: list[dict[str, Any]] = []
    for a in alpha_list:
        if a == 1.0:
            entry = {"alpha": 1.0, "delta_ssdc": result["delta_ssdc"], "ssdc_rpi": ssdc_rpi[:2],
                     "clean_acc": clean_acc, "acc": dict(acc), "fragility": dict(result["fragility"])}  # fmt: skip
        else:
            c, s, r = sweep_passes[a]
            first2, _ = _mean_over_draws([_floats(runner.run(p).accumulator.compute()) for p in r])  # type: ignore[union-attr]
            ca = runner.accuracy(c)
            sa = {name: runner.accuracy(p) for name, p in s.items()}
            entry = {"alpha": a, "delta_ssdc": _delta(first2), "ssdc_rpi": first2, "clean_acc": ca, "acc": sa,
                     "fragility": {name: fragility_score(ca, v) for name, v in sa.items()}}  # fmt: skip
        sweep.append(entry)
    result["alpha_sweep"] = sweep

    full = sum(1 for p in plan if p.probes != "first2")
    result.update(
        num_images=len(evalset),
        forward_passes=len(plan),
        passes={"full": full, "truncated": len(plan) - full, "truncated_layers": 2},
        seconds=time.perf_counter() - t0,
        timing={"corrupt": t_corrupt, "passes": t_passes},
        model={"pe": getattr(model, "pe_name", None), "depth": int(model.depth), "grid": list(grid),
               "scalable": scalable},
        settings={
            "alphas": alpha_list, "rpi_draws": rpi_draws, "seed": seed, "ssdc_mode": ssdc_mode, "metric": metric,
            "bootstrap": bootstrap, "severities": severities, "batch_size": batch_size,
            "evalset": evalset.fingerprint, "device": str(dev),
        },
    )  # fmt: skip
    return result


# ----------------------------------------------------------------------------------------------
# Tidy CSV (long format)

CSV_COLUMNS: tuple[str, ...] = ("metric", "layer", "alpha", "shift", "severity", "value")


def tidy_rows(result: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """One row per (metric, layer / α / shift / severity) of an :func:`evaluate_model` result.

    >>> r = {"clean_acc": 0.5, "rpi_acc": 0.25, "ssdc": {"normal": [0.6], "rpi": [0.1], "rpi_std": [0.0]},
    ...      "delta_ssdc": float("nan"), "acc": {"jpeg": 0.4}, "fragility": {"jpeg": 0.2}, "alpha_sweep": []}
    >>> [(row["metric"], row["layer"], row["shift"], row["value"]) for row in tidy_rows(r)][:3]
    [('clean_acc', '', '', 0.5), ('rpi_acc', '', '', 0.25), ('ssdc_normal', 0, '', 0.6)]
    """

    def row(metric: str, value: Any, layer: Any = "", alpha: Any = 1.0, shift: str = "", severity: Any = "") -> dict:
        return {"metric": metric, "layer": layer, "alpha": alpha, "shift": shift, "severity": severity, "value": value}

    yield row("clean_acc", result["clean_acc"])
    yield row("rpi_acc", result["rpi_acc"])
    ssdc = result["ssdc"]
    for key in ("normal", "rpi", "rpi_std"):
        for layer, v in enumerate(ssdc.get(key, [])):
            yield row(f"ssdc_{key}", v, layer=layer)
    for key in ("normal_ci", "rpi_ci"):
        if key in ssdc:
            for bound, values in zip(("low", "high"), ssdc[key]):
                for layer, v in enumerate(values):
                    yield row(f"ssdc_{key}_{bound}", v, layer=layer)
    yield row("delta_ssdc", result["delta_ssdc"])
    for name, v in result["acc"].items():
        yield row("acc", v, shift=name)
        yield row("fragility", result["fragility"][name], shift=name)
    for kind, accs in result.get("severities", {}).items():
        for i, a in enumerate(accs):
            yield row("acc", a, shift=kind, severity=i + 1)
            yield row("fragility", result["severity_fragility"][kind][i], shift=kind, severity=i + 1)
    for e in result["alpha_sweep"]:
        a = e["alpha"]
        yield row("sweep_delta_ssdc", e["delta_ssdc"], alpha=a)
        yield row("sweep_clean_acc", e["clean_acc"], alpha=a)
        for name, v in e["acc"].items():
            yield row("sweep_acc", v, alpha=a, shift=name)
            yield row("sweep_fragility", e["fragility"][name], alpha=a, shift=name)


def write_tidy_csv(
    result: Mapping[str, Any], path: str | os.PathLike[str], labels: Mapping[str, Any] | None = None
) -> None:
    """Write :func:`tidy_rows` to ``path`` (atomically); ``labels`` become constant leading columns."""
    labels = dict(labels or {})
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*labels, *CSV_COLUMNS], lineterminator="\n")
    writer.writeheader()
    for r in tidy_rows(result):
        writer.writerow({**labels, **r})
    fileio.write_text(path, buf.getvalue())


# ----------------------------------------------------------------------------------------------
# Analysis files


def write_analysis(
    result: Mapping[str, Any], out_dir: str | os.PathLike[str], source: Mapping[str, Any] | None = None
) -> Path:
    """Write ``analysis.json`` (the result plus ``source``: where the model and data came from) and
    ``analysis.csv`` (:func:`tidy_rows`) into ``out_dir``, atomically. The JSON is written last, so
    its presence means both are complete. Returns the JSON path."""
    out = Path(out_dir)
    doc = {**result, "source": dict(source or {})}
    write_tidy_csv(result, out / ANALYSIS_CSV)
    fileio.write_json(out / ANALYSIS_JSON, doc)
    return out / ANALYSIS_JSON


def read_analysis(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The analysis at ``path`` (a file or a directory holding ``analysis.json``); None if absent or unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / ANALYSIS_JSON
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def analysis_is_current(
    doc: Mapping[str, Any] | None, settings: Mapping[str, Any], digest: str | None = None
) -> bool:
    """Whether a stored analysis is complete and was made with ``settings`` (and weights ``digest``).

    Only the keys given in ``settings`` are compared, so a caller can ignore e.g. ``device``.
    """
    if not doc or any(k not in doc for k in RESULT_KEYS):
        return False
    stored = doc.get("settings", {})
    if any(stored.get(k) != v for k, v in settings.items()):
        return False
    return digest is None or doc.get("source", {}).get("model_digest") == digest
