"""Check 1, ``pe_identity``: what the PE is (its kind, rotary layout and frequencies, prefix tokens and grid),
measured from the values the model hands its hook points and stated beside what its config claims. A mismatch
fails: a table where the config says sin-cos, an axial table where it says mixed (or DINOv3), frequencies that
are not the configured ones.

On timm and transformers models what is measured is what the model's own forward does (hooks on its own modules,
in the audit's dtype): the prefix tokens it hands block 0, the tokens it hands block 0 against its declared table
and prefix tokens (:mod:`peanchor.audit.observe`'s reference embedding), and the rotary table its forward hands
block 0 (its layout and axes measured as above). On peanchor's ViT they are the values its pass hands the hook
points.

Imports: torch; :mod:`peanchor.pe` (the sin-cos reference code).
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import PROBES, captured, max_diff, own_rope_angles, random_images, tolerance, watcher
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject, Claim
from peanchor.pe.absolute import sincos_2d

NAME = "pe_identity"
#: Relative error at which a measured frequency or code differs from the configured one.
TOLERANCE = 1e-4


def plane_angles(tables: object, grid: tuple[int, int]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The angle of every plane at every slot, layer 0 head 0: ``(rows, cols, planes)`` and the channel pairs."""
    pairs = [p.channels for p in tables.planes]  # type: ignore[attr-defined]
    cos = tables.cos.reshape(-1, *tables.cos.shape[-2:])[0].double()  # type: ignore[attr-defined]  # (N, C)
    sin = tables.sin.reshape(-1, *tables.sin.shape[-2:])[0].double()  # type: ignore[attr-defined]
    a = torch.stack([torch.atan2(sin[:, i], cos[:, i]) for i, _ in pairs], dim=-1)  # (N, P)
    return a.reshape(*grid, len(pairs)), pairs


def measured_layout(angles: torch.Tensor) -> tuple[str, list[str | None], list[float]]:
    """``axial`` when every plane turns along one axis only from the first slot's coordinates, ``dinov3`` when its
    coordinates are centred on the grid instead (every angle the negative of its mirror slot's), else ``mixed``;
    each plane's axis and its angle per unit step along that axis (wrapped to (-π, π])."""
    axes: list[str | None] = []
    speeds: list[float] = []
    for p in range(angles.shape[-1]):
        a = angles[..., p]
        step_x = torch.remainder(a[:, 1:] - a[:, :-1] + torch.pi, 2 * torch.pi) - torch.pi  # along a row
        step_y = torch.remainder(a[1:] - a[:-1] + torch.pi, 2 * torch.pi) - torch.pi  # down a column
        moves_x, moves_y = float(step_x.abs().max()) > 1e-6, float(step_y.abs().max()) > 1e-6
        axes.append("x" if moves_x and not moves_y else "y" if moves_y and not moves_x else None)
        speeds.append(float(step_x.abs().mean()) if axes[-1] == "x" else float(step_y.abs().mean()))
    mirrored = torch.remainder(angles + angles.flip(0).flip(1) + torch.pi, 2 * torch.pi) - torch.pi
    centred = float(mirrored.abs().max()) <= 1e-5 and float(angles.abs().max()) > 0
    layout = "mixed" if any(a is None for a in axes) else "dinov3" if centred else "axial"
    return layout, axes, speeds


def check(subject: AuditSubject) -> CheckResult:
    claim, hooks = subject.claim, subject.hooks
    said = f"config ({claim.source}): {claim.describe()}"
    if watcher(subject) is not None:
        return _own(subject, said)
    if hooks.num_prefix != claim.num_prefix:
        return CheckResult(NAME, "fail", float(hooks.num_prefix), f"{hooks.num_prefix} prefix token(s); {said}")
    images = random_images(1, subject.size())
    has_table = "pe.table" in hooks.points
    declared = subject.declares
    if not has_table and declared is not None and "absolute" in declared.kinds and declared.layout not in ("table",
                                                                                                         "function"):
        return CheckResult(NAME, "pass", None, f"an absolute PE laid out {declared.layout!r}, added in its own "
                           f"code (no pe.table hook point: position_reaches checks it reaches the tokens); "
                           f"{said}")  # fmt: skip
    if has_table != (claim.prefix_rows is not None):
        what = "adds a table" if has_table else "adds no table"
        return CheckResult(NAME, "fail", None, f"the model {what}; {said}")
    if has_table and "rope.tables" not in hooks.points:
        table = captured(subject.model, images, "pe.table")
        if claim.kind not in ("learned table", "sin-cos"):
            return CheckResult(NAME, "fail", None, f"the model adds a table; {said}")
        if claim.kind == "sin-cos":
            ref = sincos_2d(subject.grid, table.patches.shape[-1], claim.sincos_temperature or 10000.0)
            err = float((table.patches[0].double() - ref.double()).abs().max())
            status = "pass" if err <= TOLERANCE else "fail"
            return CheckResult(NAME, status, err, f"a table {err:.2g} from the 2D sin-cos code at grid "
                               f"{subject.grid[0]}x{subject.grid[1]}; {said}")  # fmt: skip
        return CheckResult(NAME, "pass", None, f"a learned table at grid {subject.grid[0]}x{subject.grid[1]}; {said}")
    if "rope.tables" in hooks.points:
        if claim.kind != "rotary":
            return CheckResult(NAME, "fail", None, f"the model rotates q and k; {said}")
        angles, _ = plane_angles(captured(subject.model, images, "rope.tables"), subject.grid)
        layout, axes, speeds = measured_layout(angles)
        if layout != claim.layout:
            return CheckResult(NAME, "fail", None, f"measured {layout} rotary table; {said}")
        if claim.speeds is not None:
            measured = sorted((s for s, a in zip(speeds, axes) if a == "x"), reverse=True)
            want = sorted(claim.speeds, reverse=True)
            if len(measured) != len(want):
                return CheckResult(NAME, "fail", None, f"{len(measured)} x planes where {len(want)} are configured; "
                                   f"{said}")  # fmt: skip
            err = max(abs(m - w) / w for m, w in zip(measured, want))
            status = "pass" if err <= TOLERANCE else "fail"
            return CheckResult(NAME, status, err, f"{layout} rotary, plane frequencies {err:.2g} (relative) from the "
                               f"configured ones; {said}")  # fmt: skip
        return CheckResult(NAME, "pass", None, f"{layout} rotary table; {said}")
    if "pe.rotation" in hooks.points:
        return _general_rotation(subject, images, said)
    if subject.relative_bias:
        status = "pass" if claim.kind == "relative bias" else "fail"
        return CheckResult(NAME, status, None, f"an attention bias and no table or rotation; {said}")
    if claim.kind in ("none", "conditional"):
        return CheckResult(NAME, "pass", None, f"no table, rotation or attention bias; {said}")
    return CheckResult(NAME, "fail", None, f"no table, rotation or attention bias; {said}")


def _general_rotation(subject: AuditSubject, images: torch.Tensor, said: str) -> CheckResult:
    """A PE that rotates q and k by general per-slot matrices (LieRE, ComRoPE, STRING): the claim must be a
    rotary PE laid out as matrices, and what the model hands ``pe.rotation`` must be rotations (orthogonal blocks);
    the measured value is the largest deviation of ``R Rᵀ`` from the identity."""
    claim, declared = subject.claim, subject.declares
    if claim.kind != "rotary" or declared is None or declared.layout != "matrix":
        return CheckResult(NAME, "fail", None, f"the model rotates q and k by matrices; {said}")
    rotation = captured(subject.model, images, "pe.rotation")
    mats = getattr(rotation, "mats", None)
    if mats is None:
        return CheckResult(NAME, "fail", None, f"pe.rotation carries no matrices; {said}")
    m = mats.double()  # (L|1, H|1, N, nb, b, b)
    err = float((m @ m.transpose(-1, -2) - torch.eye(m.shape[-1], dtype=m.dtype)).abs().max())
    status = "pass" if err <= TOLERANCE else "fail"
    return CheckResult(NAME, status, err, f"per-slot rotations in blocks of {m.shape[-1]} channels, orthogonal to "
                       f"{err:.2g}; {said}")  # fmt: skip


def _own(subject: AuditSubject, said: str) -> CheckResult:
    """The check on the model's own forward (timm, transformers)."""
    obs, claim, grid = watcher(subject), subject.claim, subject.grid
    images = random_images(PROBES, subject.size()).to(obs.dtype)
    seen = obs.plain(images)
    if seen.tokens and seen.tokens[0].dtype != obs.dtype:  # timm #2794 class: what it hands on upcast
        return CheckResult(NAME, "fail", None, f"the embedding the model's own forward hands block 0 is "
                           f"{str(seen.tokens[0].dtype)[6:]} in a {str(obs.dtype)[6:]} run; {said}")  # fmt: skip
    if seen.error is not None:
        raise seen.error
    have = seen.tokens[0].shape[1] - grid[0] * grid[1]
    if have != claim.num_prefix:
        return CheckResult(NAME, "fail", float(have), f"the model's own forward hands block 0 {have} prefix "
                           f"token(s); {said}")  # fmt: skip
    declared = obs.reference_embedding(seen.tables["patches"], grid)
    gap, tol = max_diff(seen.tokens[0], declared), tolerance(TOLERANCE, obs.dtype)
    text = f"the tokens its own forward hands block 0 are {gap:.2g} (relative) from its declared "
    text += ("table and " if claim.prefix_rows is not None else "") + "prefix tokens"
    if gap > tol:
        return CheckResult(NAME, "fail", gap, f"{text}; {said}")
    handed = (0 in seen.tables and seen.tables[0] is not None) or seen.tables.get("rope") is not None
    if claim.kind != "rotary":
        if handed:
            return CheckResult(NAME, "fail", None, f"the model rotates q and k; {said}")
        if obs.declared_bias(grid) is not None:
            return _own_bias(obs, claim, grid, gap, text, said)
        return CheckResult(NAME, "pass", gap, f"{claim.kind}: {text}; {said}")
    angles = own_rope_angles(obs, seen, grid)
    if angles is None:
        why = "hands its blocks no rotary table" if not handed else "has a rope the reference does not model"
        return CheckResult(NAME, "fail" if not handed else "pass", None, f"the model's own forward {why}; {said}")
    layout, _, _ = measured_layout(angles[0])
    status = "pass" if layout == claim.layout else "fail"
    return CheckResult(NAME, status, gap, f"measured {layout} rotary table (the one its own forward hands block 0); "
                       f"{text}; {said}")  # fmt: skip


def _own_bias(obs: object, claim: Claim, grid: tuple[int, int], gap: float, text: str, said: str) -> CheckResult:
    """A relative bias, each component checked: the tokens entering block 0 (above) and the bias each block's
    attention adds in the model's own forward. Every attention is handed one token at every position, so that
    ``q·k`` is the same for every pair and the weights the model's eager attention computes are
    ``softmax(bias)`` of the bias it really adds; compared with the softmax of the declared bias (peanchor's
    gather of its tables by slot offset)."""
    images = random_images(1, obs.size(grid)).to(obs.dtype)  # type: ignore[attr-defined]
    seen = obs.run(images, eager=True, same=True)  # type: ignore[attr-defined]
    if seen.error is not None:
        raise seen.error
    declared = obs.declared_bias(grid)  # type: ignore[attr-defined]  # (L|1, H, T, T)
    worst, tol = 0.0, tolerance(TOLERANCE, obs.dtype)  # type: ignore[attr-defined]
    for layer, probs in sorted(seen.probs.items()):
        want = declared[layer if declared.shape[0] > 1 else 0].softmax(dim=-1)  # (H, T, T)
        worst = max(worst, max_diff(probs[0], want))
    if not seen.probs:
        return CheckResult(NAME, "fail", None, f"no attention weights seen in the model's own eager forward; {said}")
    bias = f"the bias its own attention adds is {worst:.2g} (relative, in the softmax of one token everywhere) " \
           "from the declared gather of its tables by slot offset"
    status = "pass" if worst <= tol and gap <= tol else "fail"
    table = "learned table" if "learned table" in claim.also else "prefix tokens"
    return CheckResult(NAME, status, max(worst, gap), f"relative bias: {bias}; {table}: {text}; {said}")


CHECKS.register(Check(NAME, "the PE the model runs is the PE its config claims", check))
