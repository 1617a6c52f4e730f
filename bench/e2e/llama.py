"""llama.py - the C trainer's Llama-style decoder in PyTorch, the same model:

- shapes of the presets of src/model/model_config.c (tiny ... 1b): untied
  embedding and head, RMSNorm (eps inside the square root), fused q/k/v
  projection (rows: q, then k, then v; head h is columns h*hd.. of each),
  RoPE on q and k rotating the two halves of each head (theta 10000),
  causal softmax attention scaled by 1/sqrt(head_dim), SwiGLU with a fused
  gate/up projection (gate rows first), no biases;
- parameter names of the C trainer's checkpoint (tok_emb, layers.N.attn_norm,
  layers.N.attn.qkv, layers.N.attn.out, layers.N.mlp_norm, layers.N.mlp.gate_up,
  layers.N.mlp.down, final_norm, head), in its order;
- its initialisation (src/model/model.c, model_init_weights): N(0, 0.02),
  N(0, 0.02 / sqrt(2 * layers)) for attn.out and mlp.down, norms 1; with
  init_like_c_trainer the very numbers of its splitmix64 + Box-Muller stream
  for a seed (1337 by default there);
- its optimizer (src/train/trainer.c): AdamW beta 0.9 / 0.95, eps 1e-8,
  decoupled weight decay 0.1 on every matrix (embedding and head too), not
  on norms; global gradient-norm clip 1.0; linear warmup then cosine to lr/10
  (src/train/lr_schedule.c, lr_at_step); per-preset lr, warmup and batch.

Activations: the residual stream is fp32 (as the C trainer's); the inputs
of the linear layers, the attention and the head are in `activation_dtype`
(bf16), the linear layers and the head run under torch.autocast(bf16) with
fp32 master weights. load_c_checkpoint reads the weights of a C trainer
checkpoint (checkpoint.bin).
"""
import math
import struct
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["LlamaConfig", "PRESETS", "TRAIN_DEFAULTS", "Llama", "lr_at_step", "param_groups", "make_optimizer",
           "init_like_c_trainer", "load_c_checkpoint"]


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    max_seq: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def num_params(self):
        d, f, v = self.dim, self.ffn_hidden, self.vocab_size
        return v * d + self.n_layers * (2 * d + 4 * d * d + 3 * f * d) + d + v * d


# src/model/model_config.c
PRESETS = {
    "tiny": LlamaConfig(2048, 128, 4, 4, 384, 128),
    "small": LlamaConfig(8192, 256, 6, 4, 768, 256),
    "medium": LlamaConfig(16384, 512, 8, 8, 1408, 512),
    "large": LlamaConfig(32768, 1024, 16, 16, 2816, 1024),
    "1b": LlamaConfig(32768, 2048, 16, 16, 5632, 2048),
}

# src/train/trainer.c preset_defaults: batch, steps, warmup, eval_every, lr
TRAIN_DEFAULTS = {
    "tiny": dict(batch=16, steps=300, warmup=30, lr=2e-3),
    "small": dict(batch=16, steps=2000, warmup=100, lr=1e-3),
    "medium": dict(batch=16, steps=5000, warmup=200, lr=6e-4),
    "large": dict(batch=8, steps=10000, warmup=500, lr=3e-4),
    "1b": dict(batch=8, steps=10000, warmup=500, lr=3e-4),
}


def default_warmup(preset, steps):
    """The trainer's warmup for a run of `steps`: the preset's, at most steps / 10 + 1."""
    return min(TRAIN_DEFAULTS[preset]["warmup"], steps // 10 + 1)


def lr_at_step(step, warmup, total_steps, max_lr, min_lr):
    """src/train/lr_schedule.c: step counts from 1."""
    if step <= warmup:
        return max_lr * step / warmup
    if step >= total_steps:
        return min_lr
    progress = (step - warmup) / (total_steps - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps, out_dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps, self.out_dtype = eps, out_dtype

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return y.to(self.out_dtype)


def rope_tables(config, device=None):
    """cos, sin: max_seq x head_dim/2 (src/model/rope.c, angles in fp64)."""
    half = config.head_dim // 2
    pos = torch.arange(config.max_seq, dtype=torch.float64, device=device)[:, None]
    freq = config.rope_theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / config.head_dim)
    angle = pos * freq
    return torch.cos(angle).float(), torch.sin(angle).float()


def apply_rope(x, cos, sin):
    """x: batch x seq x heads x head_dim; rotates (x[:half], x[half:]) pairs by the position's angle."""
    half = x.shape[-1] // 2
    a, b = x[..., :half].float(), x[..., half:].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1).to(x.dtype)


class Attention(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.qkv = torch.nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.out = torch.nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x, cos, sin):
        batch, seq, dim = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        q = apply_rope(qkv[:, :, 0], cos, sin).transpose(1, 2)
        k = apply_rope(qkv[:, :, 1], cos, sin).transpose(1, 2)
        v = qkv[:, :, 2].transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(batch, seq, dim))


class MLP(torch.nn.Module):
    def __init__(self, config, activation_dtype):
        super().__init__()
        self.hidden, self.activation_dtype = config.ffn_hidden, activation_dtype
        self.gate_up = torch.nn.Linear(config.dim, 2 * config.ffn_hidden, bias=False)
        self.down = torch.nn.Linear(config.ffn_hidden, config.dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).float().split(self.hidden, dim=-1)
        return self.down((F.silu(gate) * up).to(self.activation_dtype))


class Block(torch.nn.Module):
    def __init__(self, config, activation_dtype):
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.norm_eps, activation_dtype)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.dim, config.norm_eps, activation_dtype)
        self.mlp = MLP(config, activation_dtype)

    def forward(self, x, cos, sin):
        h = x + self.attn(self.attn_norm(x), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class Llama(torch.nn.Module):
    """forward(tokens, targets=None): logits (batch x seq x vocab), or the mean
    cross-entropy loss (fp32) when targets are given."""

    def __init__(self, config, activation_dtype=torch.bfloat16):
        super().__init__()
        self.config = config
        self.tok_emb = torch.nn.Embedding(config.vocab_size, config.dim)
        self.layers = torch.nn.ModuleList(Block(config, activation_dtype) for _ in range(config.n_layers))
        self.final_norm = RMSNorm(config.dim, config.norm_eps, activation_dtype)
        self.head = torch.nn.Linear(config.dim, config.vocab_size, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self, generator=None):
        """model_init_weights' scheme with torch's random numbers."""
        std = 0.02
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, residual_std if _is_residual(name) else std, generator=generator)

    def hidden(self, tokens):
        """The residual stream after the last block (fp32)."""
        seq = tokens.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        x = self.tok_emb(tokens)
        for block in self.layers:
            x = block(x, cos, sin)
        return x

    def output(self, hidden, targets=None):
        """Final norm, head, and the mean cross-entropy when targets are given."""
        logits = self.head(self.final_norm(hidden))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def forward(self, tokens, targets=None):
        return self.output(self.hidden(tokens), targets)


def _is_residual(name):
    return name.endswith("attn.out.weight") or name.endswith("mlp.down.weight")


def param_groups(model, weight_decay):
    """Decay every matrix, not the norms (the C trainer's model_tensor.weight_decay)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def make_optimizer(model, lr, weight_decay=0.1, fused=None):
    """AdamW as the C trainer's (beta 0.9 / 0.95, eps 1e-8, decoupled decay)."""
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


# --------------------------------------------------------------------------
# The C trainer's exact initial weights and its checkpoints

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def _signed(v):
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def _shr(z, bits):
    """Logical right shift of int64 tensors holding uint64 bit patterns."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix_normals(state0, first_draw, count, device):
    """rng_normal() values number first_draw/2 .. of a splitmix64 stream
    (src/model/rng.h): draws 2j (u1) and 2j + 1 (u2) make normal j.
    int64 arithmetic wraps modulo 2^64, as uint64 does."""
    j = torch.arange(count, dtype=torch.int64, device=device)
    out = []
    for parity in (0, 1):
        index = first_draw + 2 * j + parity + 1  # the state after draw i is state0 + (i + 1) * golden
        z = torch.full_like(j, _signed(state0)) + index * _signed(_GOLDEN)
        z = (z ^ _shr(z, 30)) * _signed(_MIX1)
        z = (z ^ _shr(z, 27)) * _signed(_MIX2)
        z = z ^ _shr(z, 31)
        out.append(_shr(z, 11).double())
    u1 = (out[0] + 1.0) * 2.0 ** -53
    u2 = out[1] * 2.0 ** -53
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(6.283185307179586 * u2)).float()


def init_like_c_trainer(model, seed=1337, chunk=1 << 24):
    """The C trainer's initial weights for `seed` (model_init_weights: one
    splitmix64 stream over the matrices in parameter order, norms 1): the
    same numbers, up to a last-bit difference of log / cos in fp64 (which
    rounds away to fp32 nearly always). Runs on the parameters' device."""
    state0 = (seed ^ 0x243F6A8885A308D3) & _MASK64
    std = 0.02
    residual_std = std / math.sqrt(2 * model.config.n_layers)
    draw = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            scale = torch.tensor(residual_std if _is_residual(name) else std, dtype=torch.float32)
            flat = p.view(-1)
            for start in range(0, flat.numel(), chunk):
                n = min(chunk, flat.numel() - start)
                flat[start:start + n] = _splitmix_normals(state0, draw, n, p.device) * scale.to(p.device)
                draw += 2 * n


_CKPT_HEADER = 140


def load_c_checkpoint(model, path):
    """Copy the fp32 weights of a C trainer checkpoint (src/train/checkpoint.h,
    version 2) into model (same preset). Returns the header's step."""
    with open(path, "rb") as f:
        head = f.read(_CKPT_HEADER)
        if head[:8] != b"BFP8CKPT":
            raise ValueError("%s: not a blockfp8 checkpoint" % path)
        version, header_bytes = struct.unpack_from("<II", head, 8)
        if version != 2 or header_bytes != _CKPT_HEADER:
            raise ValueError("%s: checkpoint version %d (%d-byte header), expected 2 (140)" % (
                path, version, header_bytes))
        shape = struct.unpack_from("<6I", head, 16)
        c = model.config
        if shape != (c.vocab_size, c.dim, c.n_layers, c.n_heads, c.ffn_hidden, c.max_seq):
            raise ValueError("%s: model shape %s, this model %s" % (path, shape, c))
        step, = struct.unpack_from("<Q", head, 56)
        count, = struct.unpack_from("<Q", head, 88)
        expected = sum(p.numel() for p in model.parameters())
        if count != expected:
            raise ValueError("%s: %d parameters, this model %d" % (path, count, expected))
        with torch.no_grad():
            for p in model.parameters():
                data = f.read(4 * p.numel())
                p.copy_(torch.frombuffer(bytearray(data), dtype=torch.float32).view_as(p))
    return step
