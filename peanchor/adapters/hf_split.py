"""A transformers model's own forward split around its layers, so that peanchor's template pass runs the layers
itself while the model's own code does everything else: :func:`first_layer_input`, the forward up to its first
layer (the stream entering it and what the encoder hands every layer: masks, DINOv3's rotary ``(cos, sin)``,
BEiT's shared bias and resolution), and :func:`from_last_layer`, the forward from the last layer's output on
(final norm, pooler, classifier). For one call the encoder's layers are stood in for by one module
(:func:`rerouted`), and the embeddings can hand on a given stream without computing it.

Imports: torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

__all__ = ["LayerInput", "first_layer_input", "from_last_layer", "rerouted", "shadowed"]


@dataclass
class LayerInput:
    """What the encoder hands its first layer: the stream ``(B, T, D)``, the other positional arguments and the
    keyword arguments (which it hands every layer alike)."""

    hidden: Tensor
    args: tuple
    kwargs: dict[str, Any]


class _Stop(Exception):
    def __init__(self, given: LayerInput) -> None:
        super().__init__("the forward stopped at its first layer")
        self.given = given


class _FirstLayer(nn.Module):
    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        raise _Stop(LayerInput(hidden_states, args, kwargs))


class _Handing(nn.Module):
    def __init__(self, x: Tensor) -> None:
        super().__init__()
        self.x = x

    def forward(self, *_args: Any, **_kwargs: Any) -> Tensor:
        return self.x  # (B, T, D): the last layer's output, whatever the encoder hands in


_NOTHING = object()


@contextmanager
def shadowed(module: nn.Module, method: str, stand_in: Any) -> Iterator[None]:
    """For the block, ``module.<method>`` is ``stand_in`` (an instance attribute shadows the class's method); what
    the instance had before (the method, or someone's own replacement) is put back after."""
    had = module.__dict__.get(method, _NOTHING)
    setattr(module, method, stand_in)
    try:
        yield
    finally:
        if had is _NOTHING:
            delattr(module, method)
        else:
            setattr(module, method, had)


@contextmanager
def rerouted(backbone: nn.Module, layers_path: str, stand_in: nn.Module, embedded: Tensor | None) -> Iterator[None]:
    """For the forward inside, the encoder runs ``stand_in`` alone in place of its layers (``layers_path`` in
    ``backbone``); with ``embedded`` ``(B, T, D)``, the embeddings hand it on without computing."""
    owner_path, _, name = layers_path.rpartition(".")
    owner = backbone.get_submodule(owner_path) if owner_path else backbone
    layers = getattr(owner, name)
    setattr(owner, name, nn.ModuleList([stand_in]))
    try:
        if embedded is None:
            yield
        else:
            with shadowed(backbone.embeddings, "forward", lambda *_args, **_kwargs: embedded):
                yield
    finally:
        setattr(owner, name, layers)


def first_layer_input(model: nn.Module, backbone: nn.Module, layers_path: str, pixel_values: Tensor,
                      embedded: Tensor | None = None, **kwargs: Any) -> LayerInput:  # fmt: skip
    """``model``'s own forward of ``pixel_values`` (with ``kwargs``), stopped at its first layer."""
    try:
        with rerouted(backbone, layers_path, _FirstLayer(), embedded):
            model(pixel_values=pixel_values, **kwargs)
    except _Stop as stop:
        return stop.given
    raise RuntimeError(f"{type(model).__name__}'s forward did not reach its first layer")


def from_last_layer(model: nn.Module, backbone: nn.Module, layers_path: str, x: Tensor,
                    pixels: tuple[int, int]) -> Any:  # fmt: skip
    """``model``'s own output (logits, pooled features) from its last layer's output ``x`` ``(B, T, D)``; its
    embeddings hand on ``x`` and its pixels are zeros of ``pixels`` size (read for their size only)."""
    stand_in = x.new_zeros(()).expand(x.shape[0], 3, *pixels)  # (B, 3, H, W), nothing allocated
    with rerouted(backbone, layers_path, _Handing(x), embedded=x):
        return model(pixel_values=stand_in)
