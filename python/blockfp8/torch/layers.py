"""blockfp8.torch.layers - the FP8 blockwise linear layers for PyTorch: the
functions (an autograd.Function over the custom operators of
blockfp8.torch.ops, so torch.compile traces forward and backward) and the
modules.

Forward quantizes x 1x128 (x and x^T from one read; f32 and bf16 as they
are, other dtypes through bf16) and W 128x128 (W and W^T from one read) and
runs y = x W^T as a 1D2D GEMM; backward quantizes dy (both layouts, one
read) and runs dx = dy W (1D2D) and dW = dy^T x (1D1D): all three GEMMs in
FP8 (recipe "fp8-blockwise"), or dW in bf16 with torch (recipe
"fp8-blockwise-bf16wgrad"). Every 128-wide k-block is promoted into fp32
(docs/RECIPE.md). What forward keeps for backward is the fp8 x^T and W^T
(1 byte an element, where a bf16 layer keeps x: 2), and only what backward
will use: without a weight gradient no x^T, without an input gradient no
W^T.

Output dtypes, as nn.Linear's: y is the autocast dtype inside an autocast
region, else x's dtype (the GEMM writes bf16 or f32 directly; any other
dtype through f32); dx is x's dtype, dW the weight's.
"""
import torch

from . import ops

__all__ = ["RECIPES", "float8_blockwise_linear", "float8_blockwise_grouped_linear", "Float8BlockwiseLinear",
           "Float8BlockwiseGroupedLinear", "GroupedLinear"]

RECIPES = ("fp8-blockwise", "fp8-blockwise-bf16wgrad")
_GEMM_DTYPES = (torch.bfloat16, torch.float32)


def _check_recipe(recipe):
    if not isinstance(recipe, str) or recipe not in RECIPES:
        raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(RECIPES)))


def _readable(t):
    """t in a dtype the quantizers read: f32 and bf16 as they are, others as bf16."""
    return t if t.dtype in _GEMM_DTYPES else t.to(torch.bfloat16)


def _weight_readable(w):
    return w if w.dtype in _GEMM_DTYPES else w.float()


def _gemm_to(dtype):
    """The dtype a GEMM writes for a result wanted in dtype."""
    return dtype if dtype in _GEMM_DTYPES else torch.float32


def _output_dtype(x):
    """nn.Linear's output dtype for input x: the autocast dtype inside an autocast region, else x's."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def _flag(flags, index):
    return None if flags is None else flags[index:index + 1]


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, fp8_wgrad, pow2, flags, out_dtype, need_dgrad, need_wgrad):
        out_features, in_features = weight.shape
        x2 = _readable(x.reshape(-1, in_features))
        keep_xt = need_wgrad and fp8_wgrad
        qx, sx, qxt, sxt = ops.quantize_1x128(x2, True, keep_xt, pow2, _flag(flags, 0))
        qw, sw, qwt, swt = ops.quantize_128x128(_weight_readable(weight), need_dgrad, pow2, _flag(flags, 1))
        y = ops.gemm_1d2d(qx, sx, qw, sw, in_features, _gemm_to(out_dtype))
        x_bf16 = x2.to(torch.bfloat16) if need_wgrad and not fp8_wgrad else None
        ctx.save_for_backward(qxt, sxt, qwt, swt, x_bf16, flags)
        ctx.fp8_wgrad, ctx.pow2 = fp8_wgrad, pow2
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        y = y.reshape(*x.shape[:-1], out_features)
        return y if y.dtype == out_dtype else y.to(out_dtype)

    @staticmethod
    def backward(ctx, dy):
        qxt, sxt, qwt, swt, x_bf16, flags = ctx.saved_tensors
        out_features = dy.shape[-1]
        in_features = qwt.shape[0]
        dy2 = _readable(dy.reshape(-1, out_features))
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = None
        if need_dx or (need_dw and ctx.fp8_wgrad):
            qdy, sdy, qdyt, sdyt = ops.quantize_1x128(dy2, need_dx, need_dw and ctx.fp8_wgrad, ctx.pow2,
                                                      _flag(flags, 2))
            if need_dx:
                dx = ops.gemm_1d2d(qdy, sdy, qwt, swt, out_features, _gemm_to(ctx.x_dtype))
                dx = dx.reshape(*dy.shape[:-1], in_features)
                dx = dx if dx.dtype == ctx.x_dtype else dx.to(ctx.x_dtype)
        if need_dw:
            if ctx.fp8_wgrad:
                dw = ops.gemm_1d1d(qdyt, sdyt, qxt, sxt, dy2.shape[0], torch.float32)
            else:
                dw = (dy2.to(torch.bfloat16).t() @ x_bf16).float()
            dw = dw if dw.dtype == ctx.w_dtype else dw.to(ctx.w_dtype)
        return dx, dw, None, None, None, None, None, None


def float8_blockwise_linear(x, weight, recipe="fp8-blockwise", pow2_scales=False, nonfinite_flags=None):
    """y = x weight^T with FP8 blockwise GEMMs in forward and backward (no
    bias). x: (..., in), weight: out x in. nonfinite_flags: None, or 3 int32
    on x's device, set to 1 when x, the weight or the output gradient holds
    NaN or Inf."""
    _check_recipe(recipe)
    if x.shape[-1] != weight.shape[1]:
        raise ValueError("blockfp8: input has %d features, the weight %d" % (x.shape[-1], weight.shape[1]))
    grad = torch.is_grad_enabled()
    need_dgrad = grad and x.requires_grad
    need_wgrad = grad and weight.requires_grad
    return _LinearFunction.apply(x, weight, recipe == "fp8-blockwise", bool(pow2_scales), nonfinite_flags,
                                 _output_dtype(x), need_dgrad, need_wgrad)


# --------------------------------------------------------------------------
# Mixture of experts

def _grouped_1d2d(qa, sa, qb, sb, k, offsets, out_dtype):
    if isinstance(offsets, torch.Tensor):
        return ops.gemm_1d2d_grouped_device_offsets(qa, sa, qb, sb, k, offsets, out_dtype)
    return ops.gemm_1d2d_grouped(qa, sa, qb, sb, k, offsets, out_dtype)


def _grouped_1d1d(qa, sa, qb, sb, k, offsets, out_dtype):
    if isinstance(offsets, torch.Tensor):
        return ops.gemm_1d1d_grouped_device_offsets(qa, sa, qb, sb, k, offsets, out_dtype)
    return ops.gemm_1d1d_grouped(qa, sa, qb, sb, k, offsets, out_dtype)


def _experts_transposed(codes_t, scales_t, experts, out_features, in_features):
    """The 128x128 quantized W^T of G stacked experts (K x G*N, one
    quantizer call over all of them) as the G matrices W_g^T stacked (G*K x
    N): blocks are exact under transposition and never straddle experts (N
    and K multiples of 128), so this is a reordering of codes and scales."""
    codes = codes_t.view(in_features, experts, out_features).permute(1, 0, 2)
    scales = scales_t.view(in_features // 128, experts, out_features // 128).permute(1, 0, 2)
    return (codes.reshape(experts * in_features, out_features),
            scales.reshape(experts * in_features // 128, out_features // 128))


class _GroupedLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, offsets, pow2, out_dtype, need_dgrad, need_wgrad):
        experts, out_features, in_features = weight.shape
        qx, sx, qxt, sxt = ops.quantize_1x128(_readable(x), True, need_wgrad, pow2, None)
        w = _weight_readable(weight).reshape(experts * out_features, in_features)
        qw, sw, qwt_all, swt_all = ops.quantize_128x128(w, need_dgrad, pow2, None)
        y = _grouped_1d2d(qx, sx, qw, sw, in_features, offsets, _gemm_to(out_dtype))
        qwt = swt = None
        if need_dgrad:
            qwt, swt = _experts_transposed(qwt_all, swt_all, experts, out_features, in_features)
        offsets_tensor = offsets if isinstance(offsets, torch.Tensor) else None
        ctx.save_for_backward(qxt, sxt, qwt, swt, offsets_tensor)
        ctx.offsets_list = None if offsets_tensor is not None else offsets
        ctx.pow2, ctx.x_dtype, ctx.w_dtype = pow2, x.dtype, weight.dtype
        return y if y.dtype == out_dtype else y.to(out_dtype)

    @staticmethod
    def backward(ctx, dy):
        qxt, sxt, qwt, swt, offsets_tensor = ctx.saved_tensors
        offsets = offsets_tensor if offsets_tensor is not None else ctx.offsets_list
        out_features = dy.shape[1]
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = None
        if need_dx or need_dw:
            qdy, sdy, qdyt, sdyt = ops.quantize_1x128(_readable(dy), need_dx, need_dw, ctx.pow2, None)
            if need_dx:
                dx = _grouped_1d2d(qdy, sdy, qwt, swt, out_features, offsets, _gemm_to(ctx.x_dtype))
                dx = dx if dx.dtype == ctx.x_dtype else dx.to(ctx.x_dtype)
            if need_dw:
                dw = _grouped_1d1d(qdyt, sdyt, qxt, sxt, dy.shape[0], offsets, torch.float32)
                dw = dw.reshape(dw.shape[0] // out_features, out_features, qxt.shape[0])
                dw = dw if dw.dtype == ctx.w_dtype else dw.to(ctx.w_dtype)
        return dx, dw, None, None, None, None, None


def float8_blockwise_grouped_linear(x, weight, offsets, pow2_scales=False):
    """Mixture of experts: y[rows of g] = x[rows of g] weight[g]^T for every
    expert g, with the three GEMMs of forward and backward grouped in FP8.
    x: tokens x K, sorted by expert; weight: G x N x K (N, K multiples of
    128); offsets: G + 1 ints, 0 first, multiples of 128 (pad each expert's
    tokens), host values, or an int64 tensor on x's device (no
    synchronization, CUDA graphs capture it; the library clamps bad values
    instead of raising); rows of y (and of x.grad) past the last expert are
    zero."""
    if weight.dim() != 3:
        raise ValueError("blockfp8: grouped weight must be experts x out x in, got shape %s" % (tuple(weight.shape),))
    experts, out_features, in_features = weight.shape
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError("blockfp8: grouped input must be tokens x %d, got %s" % (in_features, tuple(x.shape)))
    if out_features % 128 or in_features % 128:
        raise ValueError("blockfp8: grouped experts need in and out features that are multiples of 128")
    if isinstance(offsets, torch.Tensor):
        if offsets.dtype != torch.int64 or offsets.dim() != 1:
            raise ValueError("blockfp8: offsets as a tensor must be 1-D int64")
    else:
        offsets = [int(v) for v in offsets]
    if len(offsets) != experts + 1:
        raise ValueError("blockfp8: %d offsets for %d experts (expected G + 1)" % (len(offsets), experts))
    grad = torch.is_grad_enabled()
    return _GroupedLinearFunction.apply(x, weight, offsets, bool(pow2_scales), _output_dtype(x),
                                        grad and x.requires_grad, grad and weight.requires_grad)


# --------------------------------------------------------------------------
# Modules

class Float8BlockwiseLinear(torch.nn.Linear):
    """nn.Linear with FP8 blockwise GEMMs: the same parameters (weight out x
    in, optional bias) and state dict; the bias is added in y's dtype.

    Non-finite values: NaN or Inf in x, W or the output gradient makes its
    groups NaN and sets a flag in the non-persistent buffer nonfinite_flags
    (RECIPE.md section 3); check_finite() reads the flags (a
    synchronization) and raises, naming the tensor: call it every step.
    nonfinite_flags=False leaves the flags out."""

    _FLAG_NAMES = ("input", "weight", "output gradient")

    def __init__(self, in_features, out_features, bias=False, recipe="fp8-blockwise", pow2_scales=False,
                 device=None, dtype=None, nonfinite_flags=True):
        _check_recipe(recipe)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe, self.pow2_scales = recipe, bool(pow2_scales)
        flags = torch.zeros(3, dtype=torch.int32, device=device) if nonfinite_flags else None
        self.register_buffer("nonfinite_flags", flags, persistent=False)

    def reset_parameters(self):
        super().reset_parameters()
        if getattr(self, "nonfinite_flags", None) is not None:
            self.nonfinite_flags.zero_()

    @classmethod
    def from_linear(cls, linear, recipe="fp8-blockwise", pow2_scales=False, copy=True, nonfinite_flags=True):
        """The same layer with FP8 GEMMs. copy=True: new parameters holding
        copies of linear's; copy=False: linear's own parameters (shared, as
        convert_to_float8_blockwise_training does)."""
        weight = linear.weight
        with torch.device("meta"):
            layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, recipe=recipe,
                        pow2_scales=pow2_scales, dtype=weight.dtype, nonfinite_flags=False)
        if copy:
            layer.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)
            if linear.bias is not None:
                layer.bias = torch.nn.Parameter(linear.bias.detach().clone(), requires_grad=linear.bias.requires_grad)
        else:
            layer.weight = weight
            layer.bias = linear.bias
        flags = torch.zeros(3, dtype=torch.int32, device=weight.device) if nonfinite_flags else None
        layer.register_buffer("nonfinite_flags", flags, persistent=False)
        layer.train(linear.training)
        return layer

    def forward(self, x):
        y = float8_blockwise_linear(x, self.weight, self.recipe, self.pow2_scales, self.nonfinite_flags)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def nonfinite(self):
        """Which of input, weight, output gradient held NaN/Inf since the last
        reset (reads the device flags: a synchronization)."""
        if self.nonfinite_flags is None:
            return []
        return [name for name, f in zip(self._FLAG_NAMES, self.nonfinite_flags.tolist()) if f]

    def reset_nonfinite(self):
        if self.nonfinite_flags is not None:
            self.nonfinite_flags.zero_()

    def check_finite(self):
        """Raise FloatingPointError naming the tensors that held NaN/Inf."""
        bad = self.nonfinite()
        if bad:
            raise FloatingPointError("blockfp8: NaN or Inf in the %s of %s" % (" and ".join(bad), self.extra_repr()))

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, recipe=%s" % (
            self.in_features, self.out_features, self.bias is not None, self.recipe)


class GroupedLinear(torch.nn.Module):
    """The experts of a mixture-of-experts layer in plain PyTorch (the
    high-precision reference that convert_to_float8_blockwise_training
    swaps for Float8BlockwiseGroupedLinear): num_experts bias-free linear
    layers, weight experts x out x in. forward(x, offsets): x is tokens x
    in, sorted by expert, expert g's tokens rows offsets[g]..offsets[g+1];
    rows past the last expert give zeros."""

    def __init__(self, num_experts, in_features, out_features, device=None, dtype=None):
        super().__init__()
        self.num_experts, self.in_features, self.out_features = num_experts, in_features, out_features
        self.weight = torch.nn.Parameter(torch.empty(num_experts, out_features, in_features, device=device,
                                                     dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        for w in self.weight.data:
            torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5)

    def forward(self, x, offsets):
        bounds = offsets.tolist() if isinstance(offsets, torch.Tensor) else [int(v) for v in offsets]
        parts = [x[bounds[g]:bounds[g + 1]] @ self.weight[g].t().to(x.dtype) for g in range(self.num_experts)]
        rest = x.new_zeros(x.shape[0] - bounds[-1], self.out_features)
        return torch.cat(parts + [rest])

    def extra_repr(self):
        return "num_experts=%d, in_features=%d, out_features=%d" % (
            self.num_experts, self.in_features, self.out_features)


class Float8BlockwiseGroupedLinear(GroupedLinear):
    """GroupedLinear with the grouped FP8 GEMMs: the same weight (experts x
    out x in, each out and in a multiple of 128) and state dict.
    forward(x, offsets): offsets are the G + 1 expert boundaries, multiples
    of 128 (a list, or an int64 tensor on x's device)."""

    def __init__(self, num_experts, in_features, out_features, pow2_scales=False, device=None, dtype=None):
        if in_features % 128 or out_features % 128:
            raise ValueError("blockfp8: grouped experts need in and out features that are multiples of 128")
        super().__init__(num_experts, in_features, out_features, device=device, dtype=dtype)
        self.pow2_scales = bool(pow2_scales)

    @classmethod
    def from_grouped(cls, grouped, pow2_scales=False, copy=True):
        """The same experts with FP8 GEMMs (copy=False: sharing grouped's weight)."""
        with torch.device("meta"):
            layer = cls(grouped.num_experts, grouped.in_features, grouped.out_features, pow2_scales=pow2_scales,
                        dtype=grouped.weight.dtype)
        w = grouped.weight
        layer.weight = torch.nn.Parameter(w.detach().clone(), requires_grad=w.requires_grad) if copy else w
        layer.train(grouped.training)
        return layer

    def forward(self, x, offsets):
        return float8_blockwise_grouped_linear(x, self.weight, offsets, self.pow2_scales)
