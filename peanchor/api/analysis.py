"""The Python API: ``peanchor.analyze(model, data, ...)`` and the one analysis path that ``peanchor analyze`` shares.

:func:`analyze` takes a peanchor model, a timm ViT or a transformers vision model (wrapped by
:mod:`peanchor.adapters`), and data as a uint8 image tensor with labels (or without: then no accuracy), a
dataset or a ``DataLoader`` of ``(image, label)``, or a dataset name (``"scenes"``) or :class:`~peanchor.data.DataSpec`. It returns the
:class:`~peanchor.results.records.AnalysisResult` that the CLI writes (``result.save(dir)`` writes ``analysis.json``).

:func:`run_analysis` is the part both front ends run once they have a model, an evaluation set and its
:class:`~peanchor.analysis.plan.AnalysisPlan`: :func:`evaluate_model`, then the record of where model and data
came from (and NaN accuracies for a model without a head, or images without labels). :func:`analyze`'s keyword
settings (the plan's fields, :mod:`peanchor.settings.plan`, and nothing else) are the plan's "given" layer
(:func:`resolve_plan`), over a ``plan=`` of the caller's or the plan's defaults. One choice is the API's own:
``shifts=`` is the whole list of shifts (the CLI's ``--shift`` replaces or adds to the preset's). ``lenses=`` leaves out the lenses not asked for
from the result (they are still computed: the lens code cannot skip them yet). A model without a classification
head (a transformers backbone such as ``Dinov2Model``) is analysed for geometry; its accuracies and Fragility
Scores are NaN, and ``source["accuracy"]`` says why.

Imports: torch; :mod:`peanchor.analysis`, :mod:`peanchor.adapters` (lazily), :mod:`peanchor.models`,
:mod:`peanchor.data` (lazily), :mod:`peanchor.results.records`, :mod:`peanchor.presets.catalog` (a preset's shifts),
:mod:`peanchor.lenses` (their names), :mod:`peanchor.settings.plan` (the settings' names), :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import AnalysisPlan, resolve_plan
from peanchor.lenses import LENS_NAMES
from peanchor.analysis.shifts import Shift
from peanchor.core.errors import ConfigError, DataError
from peanchor.models.interface import AnalysisInterface
from peanchor.settings.plan import check_setting_names
from peanchor.presets.catalog import preset_shifts
from peanchor.results.records import AnalysisResult

__all__ = ["LENSES", "AnalysisPlan", "analyze", "match_classes", "run_analysis", "wrap_model"]

#: The lenses an analysis can report (the registry's names, a live view: plug-ins too); SSDC is always measured
#: (ΔSSDC and the α sweep are made of it).
LENSES = LENS_NAMES
NO_HEAD = "none: the model has no classification head (accuracy and FS are NaN)"
NO_LABELS = "none: no labels were given (accuracy and FS are NaN)"


def wrap_model(model: Any, img_size: int | None = None) -> AnalysisInterface:
    """``model`` behind the analysis interface (:class:`~peanchor.models.interface.AnalysisInterface`): a peanchor
    model as it is, any other through the registered backend that accepts it (:mod:`peanchor.adapters.backend`:
    timm's ViT, DeiT, Eva and BEiT; transformers' ViT, DeiT, DINOv2, CLIP, SigLIP, DINOv3 and BEiT), at
    ``img_size`` when given (transformers interpolates its table). Anything else is one ConfigError line. A
    wrapper starts in the model's own train/eval mode, which the analysis restores when it is done."""
    from peanchor.adapters.backend import wrap_model as wrap

    return wrap(model, img_size)


def model_img_size(model: AnalysisInterface) -> int:
    """The image size (px) a wrapped model takes."""
    return int(model.img_size[0])


def _without_accuracy(result: AnalysisResult) -> None:
    """NaN for every accuracy and FS of a model without a classification head (its 'logits' are features)."""
    nan = math.nan
    result.clean_acc = result.rpi_acc = nan
    result.acc = {k: nan for k in result.acc}
    result.fragility = {k: nan for k in result.fragility}
    for record in (result.severities, result.severity_fragility):
        for values in (record or {}).values():
            values[:] = [nan] * len(values)
    for point in result.alpha_sweep:
        point.clean_acc = nan
        point.acc = {k: nan for k in point.acc}
        point.fragility = {k: nan for k in point.fragility}


def run_analysis(
    model: AnalysisInterface,
    evalset: EvalSet,
    info: Any,
    plan: AnalysisPlan,
    *,
    source: dict[str, Any] | None = None,
    progress: bool | None = None,
    device: str | torch.device | None = None,
    cache: CorruptedCache | None = None,
) -> AnalysisResult:
    """The analysis both front ends run: :func:`~peanchor.analysis.evaluate.evaluate_model` with ``plan``, then
    ``source`` (where model and data came from) recorded in the result."""
    result = evaluate_model(model, evalset, plan, info=info, device=device, progress=progress, cache=cache)
    result.source = dict(source or {})
    if not model.has_head:
        _without_accuracy(result)
        result.source["accuracy"] = NO_HEAD
    elif evalset.source.get("labels") is False:
        _without_accuracy(result)
        result.source["accuracy"] = NO_LABELS
    return result


def match_classes(model: AnalysisInterface, classes: list[str]) -> None:
    """Make the model's outputs line up with the dataset's classes, or refuse (a peanchor model with more outputs
    than the dataset has classes is scored with a warning instead).

    An ImageNet-1k head (timm's or a transformers classifier's) evaluated on an ImageNet subset (classes named by
    WordNet id, e.g. ImageNet-100) keeps the logits of those classes, in the dataset's order (timm's class list
    gives the standard order of the 1000 outputs).
    """
    if not model.has_head:
        return  # a backbone: no accuracy to line up (the analysis reports none)
    args = model.model_args
    head = model.num_classes
    if head == len(classes):
        return
    wordnet = bool(classes) and all(c.startswith("n") and c[1:].isdigit() for c in classes)
    if head == 1000 and model.can_restrict_classes and wordnet:
        try:
            from timm.data import ImageNetInfo
        except ModuleNotFoundError:
            raise ConfigError("matching an ImageNet-1k head to WordNet-id classes needs timm's class list: "
                              "pip install 'peanchor[timm]'") from None  # fmt: skip

        synsets = {w: i for i, w in enumerate(ImageNetInfo().label_names())}
        missing = [c for c in classes if c not in synsets]
        if not missing:
            model.restrict_to_classes([synsets[c] for c in classes])
            return
        raise ConfigError(f"classes {', '.join(missing[:3])} are not ImageNet-1k WordNet ids")
    if args.get("source") not in ("timm", "transformers") and head > len(classes):
        # A peanchor run on data with fewer classes (a 10-class run on a 2-class folder): scored as it is, its
        # labels taken as its first outputs; the same warning from the CLI and from Python.
        warnings.warn(f"the model has {head} outputs but the dataset has {len(classes)} classes: its accuracy and FS "
                      f"take the dataset's classes for its first {len(classes)} outputs (the geometry does not depend "
                      "on them)", UserWarning, stacklevel=2)  # fmt: skip
        return
    hint = {"transformers": "a transformers head needs config.num_labels equal to the number of classes",
            "timm": "a timm model needs num_classes equal to it: --num-classes on the command line"}.get(
        args.get("source"), "a peanchor model is scored on data with the classes it was trained on")  # fmt: skip
    raise ConfigError(
        f"the model has {head} outputs but the dataset has {len(classes)} classes; "
        f"accuracy and FS need matching classes ({hint})"
    )


def _images_from(data: Any, labels: Any) -> tuple[Tensor, Tensor | None]:
    """``data`` (a tensor with or without ``labels``, an ``(images, labels)`` pair, a dataset or an iterable of
    batches, of ``(image, label)`` or of images alone) as one uint8 ``(N, 3, S, S)`` tensor and its labels ``(N,)``,
    None when none were given."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[0], Tensor) and labels is None:
        data, labels = data
    if isinstance(data, Tensor):
        images, labels = data, None if labels is None else torch.as_tensor(labels)
    else:
        from torch.utils.data import DataLoader, Dataset

        if isinstance(data, Dataset):
            data = DataLoader(data, batch_size=256)
        if not isinstance(data, Iterable):
            raise DataError(f"cannot read images from a {type(data).__name__}: expected a uint8 tensor (N, 3, S, S) "
                            "with labels, a dataset or a DataLoader of (image, label), or a dataset name")  # fmt: skip
        parts = [(item, None) if isinstance(item, Tensor) else tuple(item) for item in data]  # images alone, or pairs
        if not parts or not all(len(p) == 2 and isinstance(p[0], Tensor) for p in parts):
            raise DataError("the data gave no image tensors: expected (uint8 image (3, S, S), label) items, or images")
        unlabelled = [y is None for _, y in parts]
        if any(unlabelled) and not all(unlabelled):
            raise DataError("the data gave labels for some batches and not for others")
        images = torch.cat([x for x, _ in parts])
        labels = None if all(unlabelled) else torch.cat([torch.as_tensor(y).reshape(-1) for _, y in parts])
    if images.dim() >= 1 and images.shape[0] == 0:
        raise DataError("the evaluation set is empty: no images given")
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise DataError(f"images must be uint8 (N, 3, S, S) with values 0..255, got {images.dtype} "
                        f"{tuple(images.shape)}")  # fmt: skip
    if images.shape[-1] != images.shape[-2]:
        raise DataError(f"images must be square (N, 3, S, S), got {tuple(images.shape)}")
    if labels is None:
        return images, None
    if labels.dim() != 1 or labels.shape[0] != images.shape[0] or labels.is_floating_point():
        raise DataError(f"labels must be integers of shape ({images.shape[0]},), got {labels.dtype} "
                        f"{tuple(labels.shape)}")  # fmt: skip
    return images, labels.long()


def _evalset(data: Any, labels: Any, img_size: int | None, max_images: int | None, progress: bool | None) -> EvalSet:
    from peanchor.data import DataInfo, DataSpec

    if isinstance(data, str):
        data = DataSpec(name=data)
    if isinstance(data, DataSpec):
        spec = data if img_size is None else DataSpec.from_dict({**data.to_dict(), "img_size": img_size})
        evalset = EvalSet.from_spec(spec, max_images, progress=progress)
        evalset.source = {**evalset.source, "kind": "dataset"}
        return evalset
    images, given = _images_from(data, labels)
    # Without labels every image is class 0: the passes need a label per image, and the accuracies they give are
    # replaced by NaN (analyze: NO_LABELS).
    labels = given if given is not None else torch.zeros(images.shape[0], dtype=torch.long)
    classes = int(labels.max()) + 1
    # A placeholder for the normalisation: analyze() always sets mean/std before the analysis runs.
    info = DataInfo(num_classes=classes, img_size=int(images.shape[-1]), mean=(0.0,) * 3, std=(1.0,) * 3,
                    name="tensors")  # fmt: skip
    evalset = EvalSet.from_tensors(images, labels, info, max_images=max_images)
    evalset.source = {**evalset.source, "kind": "tensors", "num_images": len(evalset), "labels": given is not None}
    return evalset


def analyze(
    model: Any,
    data: Any,
    labels: Any = None,
    *,
    plan: AnalysisPlan | None = None,
    shifts: Sequence[Shift | str] | None = None,
    preset: str | None = None,
    device: str | torch.device | None = None,
    progress: bool | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    **settings: Any,
) -> AnalysisResult:
    """Analyse ``model`` on ``data``, as ``peanchor analyze`` does: SSDC per layer (normal and under RPI), ΔSSDC,
    the attention distance and position probe, accuracy and Fragility Score under shifts, and the α sweep.

    Args:
        model: a peanchor model, a timm ViT, or a transformers ViT / DeiT / DINOv2 / CLIP / SigLIP / DINOv3.
        data: uint8 images ``(N, 3, S, S)`` (then ``labels``), an ``(images, labels)`` pair, a dataset or
            ``DataLoader`` of ``(image, label)`` or of images alone, or a dataset name /
            :class:`~peanchor.data.DataSpec` (read at the model's resolution). ``S`` must be the model's resolution
            (a transformers model adapts). Labels are optional: without them every accuracy and Fragility Score
            is NaN and ``source["accuracy"]`` says why; the geometry (SSDC, ΔSSDC, the lenses) is the same.
        plan: a whole :class:`~peanchor.analysis.plan.AnalysisPlan` (e.g. ``AnalysisPlan.from_result`` of an
            earlier analysis), its shifts set for these images' size; not with ``preset``.
        shifts: ``Shift`` objects (they reach the plan as themselves) or strings such as ``"jpeg:quality=10"``
            (the CLI's ``--shift`` syntax, parsed once), one per kind, the whole list; None: ``plan``'s shifts, else the ``preset``'s (its name: its shifts at its own
            resolution), else the resolution rule.
        preset: a preset's name, whose shifts the model is measured under.
        device: where to run; None: a GPU when there is one.
        progress: progress bars; None: only on a terminal.
        mean: the per-channel normalisation mean the model expects; None: the model's own (a model from
            :func:`peanchor.load_model` carries its dataset's; timm's and transformers' adapters theirs), else the
            named dataset's. Tensors for a peanchor model from ``create_model`` need it, and ``std``.
        std: the per-channel normalisation standard deviation, taken like ``mean``.
        **settings: the analysis plan's settings by name, each over ``plan``'s (None: not given), with their
            defaults, flags and help in docs/python.md's table (the fields of
            :class:`~peanchor.settings.plan.PlanSettings`): ``alphas``, ``rpi_draws``, ``rpi_mode``, ``seed``,
            ``batch_size``, ``max_images``, ``severities``, ``ssdc_mode``, ``metric``, ``bootstrap``,
            ``bootstrap_groups``, ``probe_ridge``,
            ``probe_holdout``, ``lenses``, ``interventions`` (edit objects, e.g.
            ``[Hook("blocks.0.residual", fn)]``, or their spec text), ``lens_options``, ``sweeps``, ``resolutions``. An unknown name is
            one ``ConfigError`` line with the closest one. ``lenses`` leaves the lenses not asked for out of the
            result; ``lens_options`` (``{"ssdc": {"bootstrap": 200}}``) merges with ``plan``'s option by option.

    Returns:
        The :class:`~peanchor.results.AnalysisResult`: every number above, the plan it was measured with and where
        the images came from; ``.save(dir)`` writes ``analysis.json`` and ``analysis.csv``.

    Examples:
        ```python
        result = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], alphas=[1.0, 0.0])
        result.ssdc.rpi, result.delta_ssdc, result.fragility["jpeg"]
        result.save("runs/my-analysis")  # analysis.json + analysis.csv
        ```
    """
    check_setting_names(settings)
    if plan is not None and preset is not None:
        raise ConfigError("give plan= or preset=, not both: a plan carries its shifts")
    max_images = settings.get("max_images")
    subset = max_images if max_images is not None or plan is None else plan.max_images
    probed, evalset = _wrapped_with_data(model, data, labels, subset, progress)
    info = _checked_info(probed, evalset, mean, std)
    given = {key: list(value) if isinstance(value, Iterator) else value for key, value in settings.items()}
    size = evalset.img_size
    resolved = resolve_plan(
        size, defaults=plan, preset_shifts=preset_shifts(preset, size), given=given,
        shift_specs=list(shifts) if shifts is not None else (), only_given_shifts=shifts is not None,
    )  # fmt: skip
    source = {"kind": "python", "model": type(model).__name__, "model_args": probed.model_args,
              "data": evalset.source}  # fmt: skip
    return run_analysis(probed, evalset, info, resolved, source=source, progress=progress, device=device)


def _wrapped_with_data(
    model: Any, data: Any, labels: Any, subset: int | None, progress: bool | None
) -> tuple[AnalysisInterface, EvalSet]:
    """``model`` behind the analysis interface and its evaluation set: a named dataset read at the model's
    resolution, tensors at theirs (a transformers model is wrapped for them); images of another size than the
    model takes are one line."""
    from peanchor.data import DataSpec

    if isinstance(data, (str, DataSpec)):  # read at the model's resolution
        probed = wrap_model(model)
        evalset = _evalset(data, labels, model_img_size(probed), subset, progress)
    else:  # a transformers model is wrapped at the images' resolution
        evalset = _evalset(data, labels, None, subset, progress)
        probed = wrap_model(model, img_size=evalset.img_size)
    expected = model_img_size(probed)
    if evalset.img_size != expected:
        grid = "x".join(str(g) for g in probed.grid)
        raise DataError(f"images are {evalset.img_size} px but the model takes {expected} px (its {grid} patch grid); "
                        "resize the images or build the model for their size")  # fmt: skip
    return probed, evalset


def _checked_info(probed: AnalysisInterface, evalset: EvalSet, mean: Any, std: Any) -> Any:
    """The evaluation set's :class:`~peanchor.data.DataInfo` with the normalisation the model takes (given, else
    the model's own, else the dataset's), after the classes and labels are checked against the model's outputs."""
    if mean is None and std is None and probed.mean is not None and probed.std is not None:
        mean, std = probed.mean, probed.std
    info = evalset.info
    if mean is not None and std is not None:
        info = dataclasses.replace(info, mean=tuple(mean), std=tuple(std))
    elif info.name == "tensors":
        raise ConfigError("pass mean= and std=: the normalisation this model was trained with (a dataset name as "
                          "data brings its own)")  # fmt: skip
    if info.classes:  # a named dataset: an ImageNet-1k head on an ImageNet subset keeps those logits, or refuse
        match_classes(probed, list(info.classes))
    outputs = probed.num_classes
    labelled = evalset.source.get("labels") is not False
    if labelled and probed.has_head and int(evalset.labels.max()) >= outputs:
        raise DataError(f"labels go up to {int(evalset.labels.max())} but the model has {outputs} outputs")
    return info
