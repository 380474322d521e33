"""Check ``reference_parity``: the model's own forward equals peanchor's reference forward, built from what the
model declares (its table and prefix tokens, the rotary base or frequencies, layout, axes and coordinates, the
interpolation mode and antialias: :mod:`peanchor.audit.reference`), layer by layer and in the logits, at its own
grid and, where its forward takes other sizes, at a non-square other one. The reference pass is the model's own
modules with the two places where position enters replaced by peanchor's (:mod:`peanchor.audit.observe`).

A mismatch names the first layer and site where the two part and what differs, trying the usual suspects in
turn: the other rotary layout, no rotation, the axes swapped, the rotary table itself, another interpolation
mode or antialias, a tensor in another dtype than the run's.

Imports: torch.
"""

from __future__ import annotations

from typing import Any

import torch

from peanchor.audit.observe import Pass
from peanchor.audit.probes import PROBES, max_diff, random_images
from peanchor.audit.reference import RotaryReference, layout_table, reference_probs, rotate
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "reference_parity"
#: Relative tolerance by the run's dtype for the tokens and logits, whose rounding adds up over the layers (the
#: reference is float64, the model rounds at its own precision; healthy 12-block models part by up to 1.9e-2 in
#: fp16 and 1.8e-2 in bf16), and for one layer's attention weights from the same q and k.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-2, torch.bfloat16: 5e-2}
WEIGHTS_TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _declared(obs: Any, grid: tuple[int, int]) -> RotaryReference | None:
    rope = obs.declared_rope(grid)
    if isinstance(rope, str):
        raise LookupError(rope)
    return rope


def check(subject: AuditSubject) -> CheckResult:
    obs = subject.parity_observer or subject.observer
    if obs is None:
        return CheckResult(NAME, "n/a", None, "the model runs peanchor's own PE modules: they are the reference")
    why = obs.missing()
    if why:
        return CheckResult(NAME, "n/a", None, why)
    dtype = subject.dtype
    tol = TOLERANCE[dtype]
    worst, shown = 0.0, []
    for grid in obs.grids():
        try:
            rope = _declared(obs, grid)
        except LookupError as e:
            return CheckResult(NAME, "n/a", None, f"the reference does not model this rope: {e}")
        images = random_images(PROBES, (grid[0] * obs.patch, grid[1] * obs.patch)).to(dtype)
        bias = obs.declared_bias(grid)  # (L|1, H, T, T): BEiT's, gathered by peanchor from its tables

        def ours(seen: Pass, layer: int) -> torch.Tensor:
            return reference_probs(seen.q[layer], seen.k[layer], obs.scale(layer), rope, layer, obs.prefix, None, bias)

        native = obs.plain(images)  # the model's own forward, shared with the checks that read it
        ref = obs.run(images, eager=False, reference=ours)
        where = f"grid {grid[0]}x{grid[1]}"
        wrong = _wrong_dtype(native, obs, dtype)
        if wrong:
            return CheckResult(NAME, "fail", None, f"{where}: {wrong} in a {_name(dtype)} run")
        for seen in (native, ref):
            if seen.error is not None:
                kind = "model's own" if seen is native else "reference"
                line = f"{type(seen.error).__name__}: {seen.error}".splitlines()[0]
                return CheckResult(NAME, "fail", None, f"{where}: the {kind} forward raised {line}")
        for i, (a, b) in enumerate(zip(native.tokens, ref.tokens)):
            err = max_diff(a, b) if a.shape == b.shape else float("inf")
            worst = max(worst, err) if a.shape == b.shape else worst
            if err > tol:
                what = _diagnose(obs, images, grid, rope, i, a, b, tol, ref)
                apart = f"tokens {err:.2g} apart, relative" if a.shape == b.shape else f"{a.shape[1]} tokens"
                return CheckResult(NAME, "fail", err if a.shape == b.shape else None, f"{where}, {what} ({apart})")
        eager = obs.run(images, eager=True)
        for layer in sorted(set(eager.probs) & set(eager.q)):
            q, k = eager.q[layer], eager.k[layer]
            mine = reference_probs(q, k, obs.scale(layer), rope, layer, obs.prefix, None, bias)
            gap = max_diff(eager.probs[layer], mine)
            worst = max(worst, gap)
            if gap > WEIGHTS_TOLERANCE[dtype]:
                return CheckResult(NAME, "fail", gap, f"{where}, block {layer} attention: q·k differs (weights "
                                   f"{gap:.2g} apart, relative); "
                                   f"{_attention_suspects(obs, eager, layer, rope, WEIGHTS_TOLERANCE[dtype], bias)}")
        err = max_diff(native.logits, ref.logits)
        worst = max(worst, err)
        if err > tol:
            return CheckResult(NAME, "fail", err, f"{where}: the logits differ by {err:.2g} after matching tokens")
        shown.append(where)
    source = rope.source if rope is not None else "no rotation"
    source += "; the declared relative bias" if bias is not None else ""
    return CheckResult(NAME, "pass", worst, f"logits and {len(obs.attns)} layers' tokens within "
                       f"{worst:.2g} of the reference ({source}; {obs.prefix} prefix token(s)) at "
                       f"{', '.join(shown)}; {_name(dtype)}, pass ≤ {tol:g}")  # fmt: skip


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _wrong_dtype(seen: Pass, obs: Any, dtype: torch.dtype) -> str | None:
    """The first observed tensor not in the run's dtype (timm keeps its rotary table in float32 by design and casts
    the rotated q, k back: only what the blocks hand on is checked there)."""
    for i, t in enumerate(seen.tokens):
        if t.dtype != dtype:
            return f"{'the embedding' if i == 0 else f'block {i - 1} output'} is {_name(t.dtype)}"
    rope = obs.rotary_dtype(seen)
    return f"the rotary table (cos, sin) is {_name(rope)}" if rope is not None and rope != dtype else None


def _diagnose(obs: Any, images: torch.Tensor, grid: tuple[int, int], rope: RotaryReference | None, index: int,
              native: torch.Tensor, ref: torch.Tensor, tol: float, ref_pass: Pass) -> str:  # fmt: skip
    p = obs.prefix
    if index == 0:
        text = _embedding_suspects(grid, native, ref, p, tol)
        if native.shape == ref.shape and tuple(grid) != tuple(obs.native_grid) and "patches" in ref_pass.tables:
            text += _resample_suspect(obs, grid, native, ref_pass.tables["patches"], tol)
        return "the embedding (tokens entering block 0): " + text
    layer = index - 1
    eager = obs.run(images, eager=True)
    if layer in eager.probs and layer in eager.q:
        bias = obs.declared_bias(grid)
        mine = reference_probs(eager.q[layer], eager.k[layer], obs.scale(layer), rope, layer, p, None, bias)
        gap = max_diff(eager.probs[layer], mine)
        wtol = WEIGHTS_TOLERANCE.get(native.dtype, tol)
        if gap > wtol:
            return f"block {layer} attention: q·k differs ({gap:.2g}); " + _attention_suspects(
                obs, eager, layer, rope, wtol, bias)
    return f"block {layer}: its output differs while its attention weights match the reference"


def _embedding_suspects(grid: tuple[int, int], native: torch.Tensor, ref: torch.Tensor, p: int, tol: float) -> str:
    if native.shape != ref.shape:
        return f"{native.shape[1]} tokens where {ref.shape[1]} are declared ({p} prefix + {grid[0] * grid[1]})"
    prefix = max_diff(native[:, :p], ref[:, :p]) if p else 0.0
    patches = max_diff(native[:, p:], ref[:, p:])
    parts = [f"prefix tokens {prefix:.2g}"] if prefix > tol else []
    if patches > tol:
        parts.append(f"patch tokens {patches:.2g}")
    return "differ from the declared prefix and table: " + ", ".join(parts or ["within tolerance"])


def _resample_suspect(obs: Any, grid: tuple[int, int], native: torch.Tensor, patches: torch.Tensor,
                      tol: float) -> str:  # fmt: skip
    """Which other interpolation the model's table matches off its native grid, if one does."""
    declared = obs.resample
    for mode in ("bicubic", "bilinear", "nearest"):
        for antialias in (declared[1], not declared[1]):  # the declared antialias first: upsampling ignores it
            if (mode, antialias) == tuple(declared) or (mode == "nearest" and antialias):
                continue
            x = obs.reference_embedding(patches, grid, (mode, antialias))
            if x.shape == native.shape and max_diff(native, x.to(native.dtype)) <= tol:
                said = lambda m, a: f"{m}{', antialiased' if a and m != 'nearest' else ''}"  # noqa: E731
                return f"; the table is resampled {said(mode, antialias)} where {said(*declared)} is declared"
    return ""


def _attention_suspects(obs: Any, seen: Pass, layer: int, rope: RotaryReference | None, tol: float,
                        bias: torch.Tensor | None = None) -> str:  # fmt: skip
    """Which usual fault makes the reference's weights equal the model's: named, with the rotary table's gap."""
    if rope is None and bias is not None:
        return _bias_suspects(seen, layer, obs.scale(layer), obs.prefix, bias, tol)
    if rope is None:
        return "the model's attention weights are not softmax(q·kᵀ·scale), and it declares no rotation"
    q, k, p, scale, model = seen.q[layer], seen.k[layer], obs.prefix, obs.scale(layer), seen.probs[layer]
    table = _table_gap(obs, seen, layer, rope)
    other = "interleaved" if rope.layout == "half" else "half"
    suspects: dict[str, Any] = {
        f"rotary layout {other} vs the declared {rope.layout}": lambda x, a, lay: rotate(x, a, lay, other),
        "the rotation dropped (x·cos + x·sin: the partner channel forgotten)":
            lambda x, a, lay: x * layout_table(a.cos(), lay) + x * layout_table(a.sin(), lay),
        "no rotation at all": lambda x, a, lay: x,
    }  # fmt: skip
    if rope.angles.shape[0] == 1 and rope.angles.shape[-1] % 2 == 0:
        half = rope.angles.shape[-1] // 2
        suspects["the axes swapped (the row planes turn with the column)"] = lambda x, a, lay: rotate(
            x, torch.cat([a[..., half:], a[..., :half]], dim=-1), lay)
    for text, turn in suspects.items():
        if max_diff(model, reference_probs(q, k, scale, rope, layer, p, turn)) <= tol:
            return text + (f"; {table}" if table else "")
    if p and _patch_logits_agree(model, reference_probs(q, k, scale, rope, layer, p), p, tol):
        return "the patch slots agree, the prefix tokens' rows and columns do not: the prefix tokens rotated too"
    return table or f"no usual suspect matches (declared: {rope.source})"


def _patch_logits_agree(model: torch.Tensor, ref: torch.Tensor, p: int, tol: float) -> bool:
    """Whether the logits among patch slots agree up to each row's constant (``log p(i→j) − log p(i→first
    patch)``, which the prefix columns' share of the softmax does not touch)."""
    mine, theirs = (w[..., p:, p:].double().clamp_min(1e-300).log() for w in (model, ref))  # (B, H, N, N)
    return max_diff(mine - mine[..., :1], theirs - theirs[..., :1]) <= tol


def _table_gap(obs: Any, seen: Pass, layer: int, rope: RotaryReference) -> str | None:
    """How far the rotary table the model's PE code handed the block is from the declared one (None: equal)."""
    angles = rope.angles[layer if rope.angles.shape[0] > 1 else 0]  # (H|1, N, hd/2)
    got = obs.rotary_cos_sin(seen, layer)
    if got is None:
        return None
    cos, sin = got
    want_sin, want_cos = layout_table(angles.sin(), rope.layout), layout_table(angles.cos(), rope.layout)
    if sin.shape[-2:] != want_sin.shape[-2:]:
        return f"the rotary table is {tuple(sin.shape)} where {tuple(want_sin.shape)} is declared"
    gap = max(float((sin - want_sin).abs().max()), float((cos - want_cos).abs().max()))
    return f"the rotary table is {gap:.2g} from the declared one ({rope.source})" if gap > 1e-3 else None


def _bias_suspects(seen: Pass, layer: int, scale: float, p: int, bias: torch.Tensor, tol: float) -> str:
    """Which usual fault of a relative position bias makes the reference's weights equal the model's."""
    q, k, model = seen.q[layer], seen.k[layer], seen.probs[layer]
    suspects = {"the bias transposed (query and key offsets swapped)": bias.transpose(-2, -1),
                "no bias added": torch.zeros_like(bias), "the bias added twice": 2 * bias}  # fmt: skip
    for text, wrong in suspects.items():
        if max_diff(model, reference_probs(q, k, scale, None, layer, p, None, wrong)) <= tol:
            return text
    return "the relative position bias the model adds is not the declared gather of its table by slot offset"


CHECKS.register(Check(NAME, "the model's own forward equals peanchor's reference built from what it declares", check))
