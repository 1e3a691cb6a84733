"""What happens along a deep stack: activation scale and gradient size per layer (chapter 05).

    stats = depth_statistics(Encoder(32, 4, 64, num_layers=12, dropout=0.0, norm_first=True), x)
    stats["activation_std"], stats["gradient_norm"]          # one number per layer

and :func:`depth_explorer`, a depth slider and a post-/pre-norm toggle over those two curves.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor, nn

from .._validate import renamed_keywords
from ..encoder import EncoderLayer
from ..norm import LayerNorm

__all__ = ["depth_statistics", "encoder_stack", "depth_explorer"]


def _layers_and_norm(model_or_layers: nn.Module | Iterable[nn.Module]) -> tuple[list[nn.Module], nn.Module | None]:
    if isinstance(model_or_layers, nn.Module) and isinstance(getattr(model_or_layers, "layers", None), nn.ModuleList):
        return list(model_or_layers.layers), getattr(model_or_layers, "norm", None)
    if isinstance(model_or_layers, nn.Module) and not isinstance(model_or_layers, (nn.ModuleList, nn.Sequential)):
        raise TypeError("model_or_layers must be a stack with a `.layers` ModuleList (e.g. tfm_lesson.Encoder) "
                        f"or an iterable of layers, got {type(model_or_layers).__name__}")
    layers = list(model_or_layers)
    if not layers or not all(isinstance(m, nn.Module) for m in layers):
        raise ValueError("model_or_layers must hold at least one nn.Module layer")
    return layers, None


def depth_statistics(model_or_layers: nn.Module | Iterable[nn.Module], x: Tensor, mask: Tensor | None = None,
                     loss_fn: Callable[[Tensor], Tensor] | None = None, seed: int = 0) -> dict[str, list[float]]:
    """Run ``x (batch, seq_len, d_model)`` through the layers and measure, for layer ``l = 1..L``:

    - ``activation_std``: the standard deviation of the layer's output (the residual stream in pre-norm);
    - ``gradient_norm``: the L2 norm of the gradient of the loss with respect to all of the layer's parameters;
    - ``input_gradient_norm``: the L2 norm of the gradient with respect to the layer's output, divided by the
      norm of the output's own gradient at the top (1.0 for the last layer): how much a signal from the loss
      shrinks or grows on its way down.

    A stack's final ``norm`` (``tfm_lesson.Encoder`` with pre-norm has one) is applied before the loss. The
    default loss is a fixed random linear read-out, ``mean(out * g)`` with ``g ~ N(0, 1)`` drawn from ``seed``:
    a stand-in for the model's head, the same for every stack so that stacks can be compared. Gradients are
    taken with ``torch.autograd.grad``: the parameters' ``.grad`` are left untouched.
    """
    layers, final_norm = _layers_and_norm(model_or_layers)
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.is_floating_point():
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating tensor shaped (batch, seq_len, d_model), got {got}")
    with torch.enable_grad():
        h = x.detach()
        outputs: list[Tensor] = []
        for layer in layers:
            h = layer(h, mask) if mask is not None else layer(h)  # (batch, seq_len, d_model)
            outputs.append(h)
        out = final_norm(h) if final_norm is not None else h
        if loss_fn is None:
            gen = torch.Generator().manual_seed(seed)
            g = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(out)
            loss = (out * g).mean()
        else:
            loss = loss_fn(out)
        params = [[p for p in layer.parameters() if p.requires_grad] for layer in layers]
        flat = [p for group in params for p in group]
        grads = torch.autograd.grad(loss, flat + outputs, allow_unused=True)
    param_grads, output_grads = grads[:len(flat)], grads[len(flat):]
    norms, i = [], 0
    for group in params:
        sq = sum(float(g.double().pow(2).sum()) for g in param_grads[i:i + len(group)] if g is not None)
        norms.append(sq ** 0.5)
        i += len(group)
    top = float(output_grads[-1].double().norm()) or 1.0
    return {
        "activation_std": [float(o.detach().double().std()) for o in outputs],
        "gradient_norm": norms,
        "input_gradient_norm": [float(g.double().norm()) / top for g in output_grads],
    }


def encoder_stack(num_layers: int, norm_first: bool, d_model: int = 32, heads: int = 4, d_ff: int = 64,
                  seed: int = 0) -> nn.ModuleList:
    """``num_layers`` fresh :class:`~tfm_lesson.EncoderLayer` (dropout off), seeded, plus a final norm for
    pre-norm (as :class:`~tfm_lesson.Encoder` adds): returned as a stack with ``.layers`` and ``.norm``."""
    torch.manual_seed(seed)
    stack = nn.Module()
    stack.layers = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout=0.0, norm_first=norm_first)
                                 for _ in range(num_layers))
    stack.norm = LayerNorm(d_model) if norm_first else None
    return stack


@renamed_keywords(layers="num_layers")
def depth_explorer(max_layers: int = 24, num_layers: int | None = None, d_model: int = 32, heads: int = 4,
                   d_ff: int = 64, seed: int = 0):
    """A depth slider and a placement toggle (post-norm, pre-norm, both): activation std and gradient norm per
    layer of a freshly initialised stack. Outside a live notebook it shows the starting picture
    (``num_layers``, default 12, both placements)."""
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 2:
        raise ValueError(f"max_layers must be an int >= 2, got {max_layers!r}")
    num_layers = min(12, max_layers) if num_layers is None else num_layers
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 2 <= num_layers <= max_layers:
        raise ValueError(f"num_layers must be an int in [2, max_layers={max_layers}], got {num_layers!r}")
    import ipywidgets as W

    from . import viz
    from .widgets import Explorer

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, d_model, generator=gen)  # (batch, seq_len, d_model), unit-variance "embeddings"
    cache: dict[tuple[int, bool], dict[str, list[float]]] = {}

    def stats(n: int, norm_first: bool) -> dict[str, list[float]]:
        if (n, norm_first) not in cache:
            cache[(n, norm_first)] = depth_statistics(encoder_stack(n, norm_first, d_model, heads, d_ff, seed), x)
        return cache[(n, norm_first)]

    depth = W.IntSlider(value=num_layers, min=2, max=max_layers, step=1, description="layers",
                        continuous_update=False)
    placement = W.ToggleButtons(options=["post-norm", "pre-norm", "both"], value="both", description="placement")

    def render():
        n = depth.value
        chosen = ["post-norm", "pre-norm"] if placement.value == "both" else [placement.value]
        fig = viz.Figure(figsize=(9.6, 3.4), dpi=viz.DPI, layout="constrained")
        left, right = fig.subplots(1, 2)
        for k, name in enumerate(chosen):
            s = stats(n, name == "pre-norm")
            style = dict(color=viz.PALETTE[k if len(chosen) > 1 else int(name == "pre-norm")], marker="o",
                         markersize=3, label=name, linestyle="-" if name == "post-norm" else "--")
            layers = range(1, n + 1)
            left.plot(layers, s["activation_std"], **style)
            right.plot(layers, s["gradient_norm"], **style)
        right.set_yscale("log")
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
            ax.legend(frameon=False, fontsize=viz.FONT - 1)
        viz.style_axes(left, f"activation std after each layer ({n} layers)", "layer", "std of output")
        viz.style_axes(right, "gradient norm of each layer's parameters", "layer", "||dL/dθ_layer|| (log)")
        return fig

    return Explorer("depth_explorer", {"layers": depth, "placement": placement}, render,
                    note=f"Fresh stacks at initialisation (d_model={d_model}, heads={heads}, d_ff={d_ff}, dropout 0).")
