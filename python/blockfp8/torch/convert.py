"""blockfp8.torch.convert - convert_to_float8_blockwise_training: swap a
model's linear layers for the FP8 blockwise ones in place, the way
torchao.float8.convert_to_float8_training does for its layers."""
import torch

from .layers import RECIPES, Float8BlockwiseGroupedLinear, Float8BlockwiseLinear, GroupedLinear

__all__ = ["convert_to_float8_blockwise_training"]


def _swap(module, recipe, pow2_scales, nonfinite_flags):
    """The FP8 twin of an eligible module (sharing its parameters), or None."""
    if type(module) is torch.nn.Linear or (isinstance(module, torch.nn.Linear)
                                           and not isinstance(module, Float8BlockwiseLinear)
                                           and type(module).forward is torch.nn.Linear.forward):
        return Float8BlockwiseLinear.from_linear(module, recipe=recipe, pow2_scales=pow2_scales, copy=False,
                                                 nonfinite_flags=nonfinite_flags)
    if type(module) is GroupedLinear and module.in_features % 128 == 0 and module.out_features % 128 == 0:
        return Float8BlockwiseGroupedLinear.from_grouped(module, pow2_scales=pow2_scales, copy=False)
    return None


def convert_to_float8_blockwise_training(model, module_filter_fn=None, recipe="fp8-blockwise", pow2_scales=False,
                                         nonfinite_flags=True):
    """Swap, in place, every torch.nn.Linear of model (the model itself
    too) for a Float8BlockwiseLinear, and every blockfp8.torch.GroupedLinear
    whose in and out features are multiples of 128 for a
    Float8BlockwiseGroupedLinear. The new modules take the old ones'
    parameters as they are (the same Parameter objects: no copies, an
    optimizer made before keeps working), so the state dict is unchanged
    and a checkpoint of the unconverted model loads into the converted one
    and back.

    module_filter_fn(module, fqn) -> bool: convert only where it returns
    True (fqn: the module's name in model, e.g. "layers.0.attn.qkv"); None
    converts every eligible module. recipe: "fp8-blockwise" (all three GEMMs
    in FP8) or "fp8-blockwise-bf16wgrad" (the weight gradient in bf16).
    nonfinite_flags: keep the NaN/Inf flags of each linear layer (a
    3-element int32 buffer each; Float8BlockwiseLinear.check_finite).
    Returns model (or the new module, when model itself was swapped).
    Subclasses of nn.Linear that override forward are left alone."""
    if recipe not in RECIPES:
        raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(RECIPES)))
    if module_filter_fn is not None and not callable(module_filter_fn):
        raise TypeError("blockfp8: module_filter_fn must be callable (module, fqn) -> bool, or None")

    def wanted(module, fqn):
        return module_filter_fn is None or bool(module_filter_fn(module, fqn))

    if wanted(model, ""):
        swapped = _swap(model, recipe, pow2_scales, nonfinite_flags)
        if swapped is not None:
            return swapped

    def visit(parent, prefix):
        for name, child in list(parent.named_children()):
            fqn = prefix + name
            swapped = _swap(child, recipe, pow2_scales, nonfinite_flags) if wanted(child, fqn) else None
            if swapped is not None:
                setattr(parent, name, swapped)
            else:
                visit(child, fqn + ".")

    visit(model, "")
    return model
