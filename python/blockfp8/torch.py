"""blockfp8.torch - a drop-in FP8 blockwise linear layer for PyTorch.

    from blockfp8.torch import Float8BlockwiseLinear
    layer = Float8BlockwiseLinear.from_linear(torch.nn.Linear(4096, 4096, bias=False).cuda())
    y = layer(x)          # x: (..., 4096), any float dtype; y: bf16
    y.sum().backward()    # dx (bf16) and weight.grad (the weight's dtype)

Forward quantizes x 1x128 (both layouts, one read; f32 and bf16 as they
are, other dtypes through bf16) and W 128x128 (W and W^T, one read) and runs
y = x W^T as a 1D2D GEMM; backward quantizes dy (both layouts) and runs
dx = dy W (1D2D) and dW = dy^T x (1D1D): all three GEMMs in FP8 (recipe
"fp8-blockwise"), or dW in bf16 with torch (recipe
"fp8-blockwise-bf16wgrad"). Every 128-wide k-block is promoted into fp32
(docs/RECIPE.md). What forward keeps for backward is the fp8 x^T and W^T.

NaN or Inf in x, W or the output gradient makes its groups NaN and sets a
flag on the device (RECIPE.md section 3); layer.check_finite() reads the
flags (a synchronization) and raises, naming the tensor: call it every step.

Mixture of experts: float8_blockwise_grouped_linear(x, weight, offsets) runs
G experts' linear layers (weight: G x N x K) on their tokens (rows
offsets[g]..offsets[g+1] of x, multiples of 128) with the grouped GEMMs:
one launch per GEMM for all experts, forward and backward.
"""
import torch

import blockfp8 as _bf

__all__ = ["Float8BlockwiseLinear", "Float8BlockwiseGroupedLinear", "float8_blockwise_linear",
           "float8_blockwise_grouped_linear"]

_RECIPES = ("fp8-blockwise", "fp8-blockwise-bf16wgrad")


def _quantizer_input(t, features):
    """t as the contiguous 2-D matrix the quantizers read: f32 and bf16 as
    they are (the quantizers read either; no rounding to bf16 first), any
    other float dtype converted to bf16."""
    t = t.reshape(-1, features)
    if t.dtype not in (torch.float32, torch.bfloat16):
        t = t.to(torch.bfloat16)
    return t.contiguous()


class _Float8BlockwiseLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, recipe, pow2_scales, flags):
        in_features, out_features = weight.shape[1], weight.shape[0]
        if x.shape[-1] != in_features:
            raise ValueError("blockfp8: input has %d features, the weight %d" % (x.shape[-1], in_features))
        lead = x.shape[:-1]
        x2 = _quantizer_input(x, in_features)
        bf16_wgrad = recipe == "fp8-blockwise-bf16wgrad"
        flag = (lambda i: flags[i:i + 1]) if flags is not None else (lambda i: None)
        qx, qxt = _bf.quantize_1x128(x2, rows=True, cols=not bf16_wgrad, pow2=pow2_scales, nonfinite_flag=flag(0))
        w = weight.detach()
        w = (w if w.dtype in (torch.float32, torch.bfloat16) else w.float()).contiguous()
        qw, qwt = _bf.quantize_128x128(w, transposed=True, pow2=pow2_scales, nonfinite_flag=flag(1))
        y = _bf.gemm_1d2d(qx, qw)
        ctx.qwt, ctx.qxt = qwt, qxt
        ctx.x_bf16 = x2.to(torch.bfloat16) if bf16_wgrad else None
        ctx.lead, ctx.x_dtype, ctx.w_dtype = lead, x.dtype, weight.dtype
        ctx.pow2_scales, ctx.dy_flag = pow2_scales, flag(2)
        return y.reshape(*lead, out_features)

    @staticmethod
    def backward(ctx, dy):
        out_features = dy.shape[-1]
        dy2 = _quantizer_input(dy, out_features)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        fp8_wgrad = ctx.x_bf16 is None
        qdy, qdyt = _bf.quantize_1x128(dy2, rows=need_dx, cols=need_dw and fp8_wgrad, pow2=ctx.pow2_scales,
                                       nonfinite_flag=ctx.dy_flag) \
            if (need_dx or (need_dw and fp8_wgrad)) else (None, None)
        dx = dw = None
        if need_dx:
            dx = _bf.gemm_1d2d(qdy, ctx.qwt).reshape(*ctx.lead, -1).to(ctx.x_dtype)
        if need_dw:
            if fp8_wgrad:
                dw = _bf.gemm_1d1d(qdyt, ctx.qxt)
            else:
                dw = (dy2.to(torch.bfloat16).t() @ ctx.x_bf16).float()
            dw = dw.to(ctx.w_dtype)
        ctx.qwt = ctx.qxt = ctx.x_bf16 = ctx.dy_flag = None
        return dx, dw, None, None, None


def float8_blockwise_linear(x, weight, recipe="fp8-blockwise", pow2_scales=False, nonfinite_flags=None):
    """y = x weight^T with FP8 blockwise GEMMs in forward and backward (no
    bias). nonfinite_flags: None, or 3 int32 on x's device, set to 1 when x,
    the weight or the output gradient holds NaN or Inf."""
    if recipe not in _RECIPES:
        raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(_RECIPES)))
    return _Float8BlockwiseLinearFunction.apply(x, weight, recipe, pow2_scales, nonfinite_flags)


def _stack_128x128(qs):
    """One 128x128 QTensor of the row blocks of several (each a multiple of 128 rows)."""
    first = qs[0]
    return _bf.QTensor(torch.cat([q.data for q in qs]), torch.cat([q.scales for q in qs]), first.granularity,
                       sum(q.rows for q in qs), first.cols, first.ld, first.scale_ld)


class _Float8BlockwiseGroupedLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, offsets, pow2_scales):
        experts, out_features, in_features = weight.shape
        if x.dim() != 2 or x.shape[1] != in_features:
            raise ValueError("blockfp8: grouped input must be tokens x %d, got %s" % (in_features, tuple(x.shape)))
        if out_features % 128 or in_features % 128:
            raise ValueError("blockfp8: grouped experts need in and out features that are multiples of 128")
        x2 = _quantizer_input(x, in_features)
        qx, qxt = _bf.quantize_1x128(x2, rows=True, cols=True, pow2=pow2_scales)
        w = weight.detach()
        w = (w if w.dtype in (torch.float32, torch.bfloat16) else w.float()).contiguous()
        qws, qwts = zip(*(_bf.quantize_128x128(w[g], transposed=True, pow2=pow2_scales) for g in range(experts)))
        y = torch.zeros(x.shape[0], out_features, dtype=torch.bfloat16, device=x.device)
        _bf.gemm_1d2d_grouped(qx, _stack_128x128(qws), offsets, out=y)
        ctx.qxt, ctx.qwt = qxt, _stack_128x128(qwts)
        ctx.offsets, ctx.pow2_scales = offsets, pow2_scales
        ctx.shape, ctx.x_dtype, ctx.w_dtype = (experts, out_features, in_features), x.dtype, weight.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        experts, out_features, in_features = ctx.shape
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dy2 = _quantizer_input(dy, out_features)
        qdy, qdyt = _bf.quantize_1x128(dy2, rows=need_dx, cols=need_dw, pow2=ctx.pow2_scales)
        dx = dw = None
        if need_dx:
            dx = torch.zeros(dy2.shape[0], in_features, dtype=torch.bfloat16, device=dy.device)
            _bf.gemm_1d2d_grouped(qdy, ctx.qwt, ctx.offsets, out=dx)
            dx = dx.to(ctx.x_dtype)
        if need_dw:
            dw = _bf.gemm_1d1d_grouped(qdyt, ctx.qxt, ctx.offsets)
            dw = dw.reshape(experts, out_features, in_features).to(ctx.w_dtype)
        ctx.qxt = ctx.qwt = None
        return dx, dw, None, None


def float8_blockwise_grouped_linear(x, weight, offsets, pow2_scales=False):
    """Mixture of experts: y[rows of g] = x[rows of g] weight[g]^T for every
    expert g, with the three GEMMs of forward and backward grouped in FP8.
    x: tokens x K, sorted by expert; weight: G x N x K (N, K multiples of
    128); offsets: G + 1 ints, 0 first, multiples of 128 (pad each expert's
    tokens), host values, or an int64 tensor on x's device (no
    synchronization; the library clamps bad values instead of raising);
    rows of y (and of x.grad) past the last expert are zero."""
    if not isinstance(offsets, torch.Tensor):
        offsets = [int(v) for v in offsets]
    if len(offsets) != weight.shape[0] + 1:
        raise ValueError("blockfp8: %d offsets for %d experts (expected G + 1)" % (len(offsets), weight.shape[0]))
    return _Float8BlockwiseGroupedLinearFunction.apply(x, weight, offsets, pow2_scales)


class Float8BlockwiseLinear(torch.nn.Module):
    """nn.Linear with FP8 blockwise GEMMs (output bf16; bias added in bf16)."""

    def __init__(self, in_features, out_features, bias=False, recipe="fp8-blockwise", pow2_scales=False,
                 device=None, dtype=torch.float32):
        super().__init__()
        if recipe not in _RECIPES:
            raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(_RECIPES)))
        self.in_features, self.out_features = in_features, out_features
        self.recipe, self.pow2_scales = recipe, pow2_scales
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None
        self.register_buffer("nonfinite_flags", torch.zeros(3, dtype=torch.int32, device=device), persistent=False)
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)

    @classmethod
    def from_linear(cls, linear, recipe="fp8-blockwise", pow2_scales=False):
        """The same layer (its weight and bias, copied) with FP8 GEMMs."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, recipe=recipe,
                    pow2_scales=pow2_scales, device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x):
        y = float8_blockwise_linear(x, self.weight, self.recipe, self.pow2_scales, self.nonfinite_flags)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    _FLAG_NAMES = ("input", "weight", "output gradient")

    def nonfinite(self):
        """Which of input, weight, output gradient held NaN/Inf since the last
        reset (reads the device flags: a synchronization)."""
        return [name for name, f in zip(self._FLAG_NAMES, self.nonfinite_flags.tolist()) if f]

    def reset_nonfinite(self):
        self.nonfinite_flags.zero_()

    def check_finite(self):
        """Raise FloatingPointError naming the tensors that held NaN/Inf."""
        bad = self.nonfinite()
        if bad:
            raise FloatingPointError("blockfp8: NaN or Inf in the %s of %s" % (" and ".join(bad), self.extra_repr()))

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, recipe=%s" % (
            self.in_features, self.out_features, self.bias is not None, self.recipe)


class Float8BlockwiseGroupedLinear(torch.nn.Module):
    """The experts of a mixture-of-experts layer: num_experts bias-free
    linear layers (weight: experts x out x in, each out and in a multiple of
    128) run together with the grouped FP8 GEMMs. forward(x, offsets): x is
    tokens x in, sorted by expert; offsets are the G + 1 expert boundaries
    (multiples of 128; a list, or an int64 tensor on x's device)."""

    def __init__(self, num_experts, in_features, out_features, pow2_scales=False, device=None, dtype=torch.float32):
        super().__init__()
        if in_features % 128 or out_features % 128:
            raise ValueError("blockfp8: grouped experts need in and out features that are multiples of 128")
        self.num_experts, self.in_features, self.out_features = num_experts, in_features, out_features
        self.pow2_scales = pow2_scales
        self.weight = torch.nn.Parameter(torch.empty(num_experts, out_features, in_features, device=device,
                                                     dtype=dtype))
        for w in self.weight.data:
            torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5)

    def forward(self, x, offsets):
        return float8_blockwise_grouped_linear(x, self.weight, offsets, self.pow2_scales)

    def extra_repr(self):
        return "num_experts=%d, in_features=%d, out_features=%d" % (
            self.num_experts, self.in_features, self.out_features)
