"""blockfp8.torch - FP8 blockwise training layers for PyTorch, on
libblockfp8's kernels, traceable by torch.compile (fullgraph, no graph
breaks) on CPU and CUDA tensors.

    import blockfp8.torch as bft
    model = MyTransformer().cuda()
    bft.convert_to_float8_blockwise_training(model, module_filter_fn=lambda m, fqn: fqn != "output")
    model = torch.compile(model)

- convert_to_float8_blockwise_training(model, module_filter_fn, recipe):
  swaps nn.Linear (and GroupedLinear experts) in place for the FP8 layers,
  sharing their parameters; state dicts stay nn.Linear's.
- Float8BlockwiseLinear: nn.Linear with all three GEMMs of forward and
  backward in FP8 (recipe "fp8-blockwise"; "fp8-blockwise-bf16wgrad" keeps
  the weight gradient in bf16), 1x128 activation / gradient groups, 128x128
  weight blocks, every k-block promoted into fp32 (docs/RECIPE.md);
  check_finite() raises on NaN/Inf met by its quantizers.
- Float8BlockwiseGroupedLinear: the experts of a mixture-of-experts layer on
  the grouped GEMMs; GroupedLinear is its plain PyTorch twin.
- float8_blockwise_linear, float8_blockwise_grouped_linear: the functions.
- blockfp8.torch.ops: the custom operators underneath (torch.ops.blockfp8.*),
  with fake implementations for tracing.

Works with DDP and FSDP2 (fully_shard): the layers see the unsharded
weight; in an autocast region y takes the autocast dtype, as nn.Linear's.
CUDA graphs (torch.compile mode="reduce-overhead"): the library makes two
small device buffers on first use of a GEMM shape (split-K workspace, the
1D1D scale operand); the eager warm-up step before capture makes them.
"""
from . import ops
from .convert import convert_to_float8_blockwise_training
from .layers import (RECIPES, Float8BlockwiseGroupedLinear, Float8BlockwiseLinear, GroupedLinear,
                     float8_blockwise_grouped_linear, float8_blockwise_linear)

__all__ = ["ops", "RECIPES", "convert_to_float8_blockwise_training", "Float8BlockwiseLinear",
           "Float8BlockwiseGroupedLinear", "GroupedLinear", "float8_blockwise_linear",
           "float8_blockwise_grouped_linear"]
