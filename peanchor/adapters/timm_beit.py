"""The timm BEiT backend: ``timm.models.beit.Beit`` (BEiT, BEiT v2) behind the analysis interface, through timm's own
modules, on the timm pass (:class:`~peanchor.adapters.timm_pass.TimmPass`).

Its positional code is a relative position bias: a table of ``(2h-1)(2w-1) + 3`` rows (one column per head) that
each attention gathers into ``(1, H, T, T)`` by slot pair and adds to ``q·kᵀ``, either in every block
(``use_rel_pos_bias``: ``block.attn.relative_position_bias_table``) or once for all blocks
(``use_shared_rel_pos_bias``: ``model.rel_pos_bias``), optionally beside a learned absolute table
(``use_abs_pos_emb``). The pass is timm's ``forward_features`` step by step:

* RPI moves the patch content after the patch embedding; the bias stays on its slot pairs;
* α multiplies the bias (and the absolute table): the pass hands each block its bias × α;
* ``pe.bias`` is the bias each block adds, ``(L|1, H, T, T)`` (shared plus own, α applied); an edited bias is
  what each block's attention adds in place of its own (``pe_zero``: zeros, as with zeroed tables);
* ``pe.table`` is the absolute table where the model has one (its CLS row first); BEiT takes no ``input.grid``
  (its bias is defined on the trained window);
* attention weights come from timm's eager path (:mod:`peanchor.adapters.timm_attention`).

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (backend, timm_audit, timm_load, timm_pass),
:mod:`peanchor.interventions`, :mod:`peanchor.audit` (the claim, the observer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.timm_audit import timm_subject
from peanchor.adapters.timm_load import describe, require_timm
from peanchor.adapters.timm_pass import TimmPass
from peanchor.interventions import EditPass, Intervention

__all__ = ["TimmBeit", "TimmBeitBackend", "beit_observer", "per_block_bias"]


class TimmBeit(TimmPass):
    """A timm BEiT behind peanchor's analysis interface; ``self.model`` is the unchanged timm model."""

    families = ("beit",)

    @property
    def has_bias(self) -> bool:
        """Whether the model has a relative position bias (shared or per block)."""
        m = self.model
        return m.rel_pos_bias is not None or any(b.attn.relative_position_bias_table is not None for b in m.blocks)

    def _pe_points(self) -> set[str]:
        """``pe.table`` where it has an absolute table, ``pe.bias`` where it has a bias; no ``input.grid``."""
        points = {"pe.table"} if self.model.pos_embed is not None else set()
        return points | {"pe.bias"} if self.has_bias else points

    def _after_table(self, x: Tensor, grid: tuple[int, int], has_table: bool) -> Tensor:
        return self.model.pos_drop(x)  # timm's BEiT has neither patch dropout nor a pre-norm

    def _bias(self) -> Tensor | None:
        """What each block adds to its attention logits at α = 1, ``(L|1, H, T, T)`` (None: no bias)."""
        m = self.model
        common = m.rel_pos_bias() if m.rel_pos_bias is not None else None  # (H, T, T)
        own = [b.attn._get_rel_pos_bias()[0] if b.attn.relative_position_bias_table is not None else None
               for b in m.blocks]  # fmt: skip
        return per_block_bias(common, own)

    def _block_arguments(self, intervention: Intervention, run: EditPass | None,
                         stack: ExitStack) -> Callable[[int], dict[str, Any]]:  # fmt: skip
        """Each block's ``shared_rel_pos_bias``; in a pass at α ≠ 1 or with an edited bias, every block is handed
        its whole bias (its own table's gather silenced for the pass)."""
        m = self.model
        alpha = intervention.pe_scale
        edited = run is not None and run.acts_at("pe.bias")
        if alpha == 1.0 and not edited:  # timm's own computation
            shared = m.rel_pos_bias() if m.rel_pos_bias is not None else None
            return lambda i: {"shared_rel_pos_bias": shared}
        full = self._bias()  # (L|1, H, T, T)
        if full is None:
            return lambda i: {"shared_rel_pos_bias": None}
        bias = full * alpha if alpha != 1.0 else full
        if edited:
            assert run is not None
            bias = run.bias(bias)
            bias = torch.zeros_like(full) if bias is None else bias  # no bias: what zeroed tables add
        for block in m.blocks:
            stack.enter_context(_silenced(block.attn))
        return lambda i: {"shared_rel_pos_bias": bias[i if bias.shape[0] > 1 else 0][None]}  # (1, H, T, T)


def per_block_bias(common: Tensor | None, own: list[Tensor | None]) -> Tensor | None:
    """The bias each block adds, ``(L|1, H, T, T)``, from the shared one ``(H, T, T)`` and each block's own (None:
    that block has none); one slice for all blocks where no block has its own, None where there is none at all."""
    if all(o is None for o in own):
        return None if common is None else common[None]  # (1, H, T, T)
    return torch.stack([o if common is None else common if o is None else o + common  # type: ignore[operator]
                        for o in own])  # (L, H, T, T)


@contextmanager
def _silenced(attn: nn.Module) -> Iterator[None]:
    """For a pass, an attention module that gathers no bias of its own (the pass hands it the whole bias)."""
    table = attn._parameters.get("relative_position_bias_table")
    if table is None:
        yield
        return
    attn._parameters["relative_position_bias_table"] = None  # timm's Attention then adds the handed bias only
    try:
        yield
    finally:
        attn._parameters["relative_position_bias_table"] = table


def beit_observer(wrapped: TimmBeit) -> Any:
    """The audit's observer of timm's BEiT (:class:`~peanchor.audit.observe.TimmObserver` on BEiT's modules): its
    q and k are read off the attention's input and its own projection weights (timm's BEiT makes them in one
    ``F.linear``, no module to watch), its bias tables are what removing the PE zeroes, and its declared bias is
    peanchor's gather of those tables by slot offset (:func:`peanchor.audit.reference.relative_bias`)."""
    from peanchor.audit.observe import TimmObserver
    from peanchor.audit.reference import relative_bias

    class BeitObserver(TimmObserver):
        def missing(self) -> str | None:
            return None

        def qk_hooks(self, attn: nn.Module, layer: int, seen: Any) -> list[Any]:
            def hook(_m: nn.Module, args: tuple, kwargs: dict) -> None:
                x = args[0] if args else kwargs["x"]  # (B, T, D)
                qkv = F.linear(x, attn.qkv.weight, attn.qkv.bias)  # (B, T, 3D)
                if attn.q_bias is not None:
                    qkv = qkv + torch.cat((attn.q_bias, attn.k_bias, attn.v_bias))
                q, k, _ = qkv.reshape(x.shape[0], x.shape[1], 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
                seen.q[layer], seen.k[layer] = q, k  # (B, H, T, hd) each

            return [attn.register_forward_pre_hook(hook, with_kwargs=True)]

        def bias_tables(self) -> list[Tensor]:
            shared = self.inner.rel_pos_bias
            own = [a.relative_position_bias_table for a in self.attns if a.relative_position_bias_table is not None]
            return own + ([shared.relative_position_bias_table] if shared is not None else [])

        def declared_bias(self, grid: tuple[int, int]) -> Tensor | None:
            shared = self.inner.rel_pos_bias
            common = relative_bias(shared.relative_position_bias_table, grid) if shared is not None else None
            own = [relative_bias(a.relative_position_bias_table, grid)
                   if a.relative_position_bias_table is not None else None for a in self.attns]  # fmt: skip
            return per_block_bias(common, own)

    return BeitObserver(wrapped)


@BACKENDS.register
class TimmBeitBackend(Backend):
    """timm's BEiT (``timm.models.beit.Beit``)."""

    name = "timm_beit"
    summary = "a timm BEiT"

    def accepts(self, model: Any) -> bool:
        return type(model).__module__ == "timm.models.beit"

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        return TimmBeit(model, model_args=model_args or describe(model, require_timm().__version__)).train(
            model.training)  # fmt: skip

    def wraps(self, wrapped: Any) -> bool:
        return isinstance(wrapped, TimmBeit)

    def audit_subject(self, wrapped: Any) -> Any:
        """The claim read off timm's attributes (``use_rel_pos_bias`` / ``rel_pos_bias``, ``pos_embed``) and timm's
        own forward."""
        from peanchor.audit.subject import Claim

        inner = wrapped.model
        shared = inner.rel_pos_bias is not None
        table = inner.pos_embed is not None
        said = (f"timm {type(inner).__name__}: {'a shared' if shared else 'per-block'} relative position bias, "
                f"pos_embed={'yes' if table else 'none'}, num_prefix_tokens={inner.num_prefix_tokens}")  # fmt: skip
        claim = Claim("relative bias", None, 1 if table else None, int(inner.num_prefix_tokens), source=said,
                      also=("learned table",) if table else ())  # fmt: skip
        return timm_subject(wrapped, claim, beit_observer(wrapped), relative_bias=wrapped.has_bias)

    def signature(self, wrapped: Any) -> str:
        inner = wrapped.model
        own = inner.blocks[0].attn.relative_position_bias_table is not None
        return (f"Beit shared_bias={inner.rel_pos_bias is not None} block_bias={own} "
                f"table={inner.pos_embed is not None}")
