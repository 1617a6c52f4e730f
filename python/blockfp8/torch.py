"""blockfp8.torch - a drop-in FP8 blockwise linear layer for PyTorch.

    from blockfp8.torch import Float8BlockwiseLinear
    layer = Float8BlockwiseLinear.from_linear(torch.nn.Linear(4096, 4096, bias=False).cuda())
    y = layer(x)          # x: (..., 4096), any float dtype; y: bf16
    y.sum().backward()    # dx (bf16) and weight.grad (the weight's dtype)

Forward quantizes x 1x128 (both layouts, one read) and W 128x128 (W and W^T,
one read) and runs y = x W^T as a 1D2D GEMM; backward quantizes dy (both
layouts) and runs dx = dy W (1D2D) and dW = dy^T x (1D1D): all three GEMMs in
FP8 (recipe "fp8-blockwise"), or dW in bf16 with torch (recipe
"fp8-blockwise-bf16wgrad"). Every 128-wide k-block is promoted into fp32
(docs/RECIPE.md). What forward keeps for backward is the fp8 x^T and W^T.

NaN or Inf in x, W or the output gradient makes its groups NaN and sets a
flag on the device (RECIPE.md section 3); layer.check_finite() reads the
flags (a synchronization) and raises, naming the tensor: call it every step.
"""
import torch

import blockfp8 as _bf

__all__ = ["Float8BlockwiseLinear", "float8_blockwise_linear"]

_RECIPES = ("fp8-blockwise", "fp8-blockwise-bf16wgrad")


class _Float8BlockwiseLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, recipe, pow2_scales, flags):
        in_features, out_features = weight.shape[1], weight.shape[0]
        if x.shape[-1] != in_features:
            raise ValueError("blockfp8: input has %d features, the weight %d" % (x.shape[-1], in_features))
        lead = x.shape[:-1]
        x2 = x.reshape(-1, in_features).to(torch.bfloat16).contiguous()
        bf16_wgrad = recipe == "fp8-blockwise-bf16wgrad"
        flag = (lambda i: flags[i:i + 1]) if flags is not None else (lambda i: None)
        qx, qxt = _bf.quantize_1x128(x2, rows=True, cols=not bf16_wgrad, pow2=pow2_scales, nonfinite_flag=flag(0))
        w = weight.detach()
        w = (w if w.dtype in (torch.float32, torch.bfloat16) else w.float()).contiguous()
        qw, qwt = _bf.quantize_128x128(w, transposed=True, pow2=pow2_scales, nonfinite_flag=flag(1))
        y = _bf.gemm_1d2d(qx, qw)
        ctx.qwt, ctx.qxt = qwt, qxt
        ctx.x_bf16 = x2 if bf16_wgrad else None
        ctx.lead, ctx.x_dtype, ctx.w_dtype = lead, x.dtype, weight.dtype
        ctx.pow2_scales, ctx.dy_flag = pow2_scales, flag(2)
        return y.reshape(*lead, out_features)

    @staticmethod
    def backward(ctx, dy):
        out_features = dy.shape[-1]
        dy2 = dy.reshape(-1, out_features).to(torch.bfloat16).contiguous()
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
                dw = (dy2.t() @ ctx.x_bf16).float()
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
