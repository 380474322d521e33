"""The timm BEiT backend: ``timm.models.beit.Beit`` (BEiT, BEiT v2) behind the analysis interface, through timm's own
modules, on the timm ViT adapter's pass (:class:`~peanchor.adapters.timm_vit.TimmViT`).

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

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (backend, timm_vit, timm_hooks, timm_load),
:mod:`peanchor.interventions`, :mod:`peanchor.audit` (the subject).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.timm_hooks import block_sites
from peanchor.adapters.timm_load import describe, require_timm
from peanchor.adapters.timm_vit import TimmPE, TimmViT
from peanchor.interventions import EditPass, HookPoints, Intervention, PETable, permute_tokens

__all__ = ["TimmBeit", "TimmBeitBackend", "beit_observer"]


class TimmBeit(TimmViT):
    """A timm BEiT behind peanchor's analysis interface; ``self.model`` is the unchanged timm model."""

    @staticmethod
    def _families() -> dict[type, tuple[str, dict[type, str]]]:
        from timm.models.beit import Beit, Block

        return {Beit: ("beit", {Block: "norm1"})}

    def _read_pe(self) -> TimmPE:
        self._rope_builder = None
        has_ape = self.model.pos_embed is not None
        return TimmPE(name="timm:rel_bias_ape" if has_ape else "timm:rel_bias", scalable=True, has_ape=has_ape,
                      rope=None)  # fmt: skip

    @property
    def has_bias(self) -> bool:
        """Whether the model has a relative position bias (shared or per block)."""
        m = self.model
        return m.rel_pos_bias is not None or any(b.attn.relative_position_bias_table is not None for b in m.blocks)

    @property
    def hook_points(self) -> HookPoints:
        points = {f"blocks.{{k}}.{site}" for site in block_sites(self.model.blocks)}
        points |= {"pe.table"} if self.model.pos_embed is not None else set()
        points |= {"pe.bias"} if self.has_bias else set()
        heads = int(self.model.blocks[0].attn.num_heads)
        return HookPoints(self.pe_name, frozenset(points), self.depth, heads, self.grid, self.num_prefix)

    def _bias(self) -> Tensor | None:
        """What each block adds to its attention logits at α = 1, ``(L|1, H, T, T)`` (None: no bias)."""
        m = self.model
        common = m.rel_pos_bias() if m.rel_pos_bias is not None else None  # (H, T, T)
        own = [b.attn._get_rel_pos_bias()[0] if b.attn.relative_position_bias_table is not None else None
               for b in m.blocks]  # fmt: skip
        if all(o is None for o in own):
            return None if common is None else common[None]
        return torch.stack([o if common is None else common if o is None else o + common  # type: ignore[operator]
                            for o in own])  # fmt: skip

    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        """timm's ``forward_features`` up to the blocks: patches (permuted), CLS, the table at α (edited)."""
        m = self.model
        x = self._embed_patches(images)  # (B, N, D)
        if intervention.token_perm is not None:
            x = permute_tokens(x, intervention.token_perm)  # content moves, slots (and their bias) stay
        x = torch.cat((m.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + N, D)
        pos = m.pos_embed  # (1, 1 + N, D) or None
        if pos is None:
            return m.pos_drop(x)
        pos = pos if intervention.pe_scale == 1.0 else pos * intervention.pe_scale
        if run is not None and run.acts_at("pe.table"):
            return m.pos_drop(run.table(PETable(pos[:, :1], pos[:, 1:], self.grid)).added_to(x))
        return m.pos_drop(x + pos)

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
            if all(o is None for o in own):
                return None if common is None else common[None]  # (1, H, T, T)
            return torch.stack([o if common is None else common if o is None else o + common  # type: ignore[operator]
                                for o in own])  # (L, H, T, T)

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
        from peanchor.audit.subject import AuditSubject, Claim

        inner = wrapped.model
        shared = inner.rel_pos_bias is not None
        table = inner.pos_embed is not None
        said = (f"timm {type(inner).__name__}: {'a shared' if shared else 'per-block'} relative position bias, "
                f"pos_embed={'yes' if table else 'none'}, num_prefix_tokens={inner.num_prefix_tokens}")  # fmt: skip
        claim = Claim("relative bias", None, 1 if table else None, int(inner.num_prefix_tokens), source=said,
                      also=("learned table",) if table else ())  # fmt: skip
        return AuditSubject(wrapped, wrapped.pe_name, "timm", claim, wrapped.img_size[0] // wrapped.grid[0],
                            wrapped.pe_scalable, None, wrapped.has_bias, lambda images: inner(images),
                            observer=beit_observer(wrapped))  # fmt: skip

    def signature(self, wrapped: Any) -> str:
        inner = wrapped.model
        own = inner.blocks[0].attn.relative_position_bias_table is not None
        return (f"Beit shared_bias={inner.rel_pos_bias is not None} block_bias={own} "
                f"table={inner.pos_embed is not None}")
