"""moe_e2e.py - end-to-end training of the C trainer's mixture-of-experts model
(the moe-1b preset by default: 2.72B parameters, 869M active; batch 4 x seq
2048) in PyTorch bf16, one run per mode, each in its own process:

    bf16-eager        linear layers under torch.autocast(bf16), experts in bf16
    bf16-compile      the same, each block and the output torch.compile'd

The model is the trainer's (src/model/model_config.c, src/model/model_moe.c,
src/nn/moe.c): llama.py's attention and dense SwiGLU blocks for the first
dense_layers blocks; in the others a router (bf16 GEMM, fp32 logits), sigmoid
scores, the top-k experts of score + bias (the bias steers the choice only),
their weights the chosen scores normalized to sum to 1, SwiGLU experts
(gate rows first in each expert's gate|up), and a shared SwiGLU expert every
token takes. The selection bias moves after every optimizer step by the
preset's rate towards the mean load (bias += rate * sign(mean - load),
DeepSeek-V3's auxiliary-loss-free balancing), as the trainer's. Parameters
in the trainer's order and names (router, experts_w13 E x 2F x D, experts_w2
E x D x F, shared_w13, shared_w2) and its initialisation: N(0, 0.02), the
residual projections (attn.out, mlp.down, every *_w2) N(0, 0.02 / sqrt(2 *
layers)), norms 1, bias 0; --init c-trainer (default) draws the C trainer's
very numbers for --seed.

The routed experts run as two grouped matrix products (torch._grouped_mm:
each expert's token rows contiguous, padded to 16 rows) when the installed
torch has a working one, else as a loop over the experts (--experts says
which; the output names the path taken). Optimizer and schedule as
llama_e2e.py (AdamW 0.9/0.95, wd 0.1 not on norms, clip 1.0, warmup then
cosine to lr/10), batches and validation windows from the same token file.

Per mode it prints tokens/s over the steady steps (from --timed-from on, CUDA
events around them), the peak memory (torch.cuda.max_memory_allocated), the
training loss (mean of the last 10 steps), the validation loss after the run
and the worst MoE block's load (busiest expert's tokens over the mean) every
--log-every steps and at the end.

    python3 bench/e2e/moe_e2e.py --tokens .carry/e2e/corpus-32768.u16 [--steps 100] \\
        [--modes bf16-compile] [--json out.json]
    python3 bench/e2e/moe_e2e.py --synthetic ...       random tokens (throughput only)
    python3 bench/e2e/moe_e2e.py --preset moe-tiny --device cpu --synthetic --steps 3   (a smoke run)

Tokens: a raw little-endian uint16 file of token ids (prepare_tokens.sh).
Exit code: 0 when every mode ran, 1 otherwise.
"""
import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

MODES = ("bf16-eager", "bf16-compile")
DEFAULT_MODES = "bf16-compile"
GROUP_ALIGN = 16  # rows of an expert's run for torch._grouped_mm (16-byte aligned bf16 row blocks)


@dataclass(frozen=True)
class MoeConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    ffn_hidden: int  # the dense blocks' SwiGLU width
    max_seq: int
    num_experts: int
    dense_layers: int
    top_k: int
    expert_hidden: int
    shared_hidden: int
    bias_update_rate: float
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def num_params(self):
        d, v, e = self.dim, self.vocab_size, self.num_experts
        dense = 3 * self.ffn_hidden * d
        moe = e * d + 3 * e * self.expert_hidden * d + 3 * self.shared_hidden * d
        moe_layers = self.n_layers - self.dense_layers
        return (2 * v * d + d + self.n_layers * (2 * d + 4 * d * d) + self.dense_layers * dense + moe_layers * moe)

    def active_params(self):
        d, v = self.dim, self.vocab_size
        moe = self.num_experts * d + 3 * self.top_k * self.expert_hidden * d + 3 * self.shared_hidden * d
        return (2 * v * d + d + self.n_layers * (2 * d + 4 * d * d) + self.dense_layers * 3 * self.ffn_hidden * d +
                (self.n_layers - self.dense_layers) * moe)


# src/model/model_config.c (score function sigmoid, weights normalized, route scale 1, no capacity)
PRESETS = {
    "moe-tiny": MoeConfig(2048, 128, 4, 4, 384, 128, 8, 1, 2, 128, 128, 1e-2),
    "moe-1b": MoeConfig(32768, 2048, 16, 16, 5632, 2048, 32, 2, 4, 768, 1536, 1e-2),
}
# src/train/train_plan.c preset_defaults
TRAIN_DEFAULTS = {
    "moe-tiny": dict(batch=16, steps=300, warmup=30, lr=2e-3),
    "moe-1b": dict(batch=4, steps=10000, warmup=500, lr=3e-4),
}


def default_warmup(preset, steps):
    """The trainer's warmup for a run of `steps`: the preset's, at most steps / 10 + 1."""
    return min(TRAIN_DEFAULTS[preset]["warmup"], steps // 10 + 1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--modes", default=DEFAULT_MODES, help="comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--preset", default="moe-1b", choices=sorted(PRESETS), help="model (default moe-1b)")
    p.add_argument("--vocab-size", type=int, default=None, help="another vocabulary (default: the preset's)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default: the preset's)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the preset's context)")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    p.add_argument("--timed-from", type=int, default=21, help="first step of the throughput window (default 21)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the preset's)")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: the trainer's rule)")
    p.add_argument("--seed", type=int, default=1337, help="weights (the C trainer's init) and batch order")
    p.add_argument("--init", choices=("c-trainer", "torch"), default="c-trainer",
                   help="c-trainer: the C trainer's very initial weights (default); torch: its scheme, torch's RNG")
    p.add_argument("--experts", choices=("auto", "grouped-mm", "loop"), default="auto",
                   help="the routed experts: torch._grouped_mm, a loop over experts, or auto (grouped-mm when it "
                        "works, default)")
    p.add_argument("--tokens", default=None, help="uint16 token file")
    p.add_argument("--synthetic", action="store_true", help="uniform random tokens instead of --tokens")
    p.add_argument("--eval-batches", type=int, default=4, help="validation batches after the run (default 4)")
    p.add_argument("--log-every", type=int, default=10, help="a progress line (loss, load) every N steps")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--json", default=None, help="write the results here (JSON)")
    p.add_argument("--in-process", action="store_true", help="run the modes in this process")
    p.add_argument("--mode-json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for mode in args.modes.split(","):
        if mode not in MODES:
            p.error("unknown mode %r (modes: %s)" % (mode, ", ".join(MODES)))
    if not args.synthetic and not args.tokens:
        p.error("give --tokens FILE (prepare_tokens.sh) or --synthetic")
    if args.timed_from > args.steps:
        p.error("--timed-from %d is past --steps %d" % (args.timed_from, args.steps))
    return args


# --------------------------------------------------------------------------
# The model

def build_classes(torch, llama):
    F = torch.nn.functional

    def grouped_mm_works(device):
        """A feature test: torch._grouped_mm exists and computes 2D x 3D products with offsets, with a gradient."""
        if not hasattr(torch, "_grouped_mm"):
            return False
        try:
            a = torch.randn(2 * GROUP_ALIGN, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
            b = torch.randn(2, 16, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
            offs = torch.tensor([GROUP_ALIGN, 2 * GROUP_ALIGN], device=device, dtype=torch.int32)
            y = torch._grouped_mm(a, b.transpose(-2, -1), offs=offs)
            y.float().sum().backward()
            ref = torch.cat([a[:GROUP_ALIGN].float() @ b[0].float().T, a[GROUP_ALIGN:].float() @ b[1].float().T])
            return bool((y.float() - ref).abs().max() < 0.1 * ref.abs().max() + 1e-3) and b.grad is not None
        except Exception:  # noqa: BLE001 (any failure: not usable here)
            return False

    class MoE(torch.nn.Module):
        """The trainer's MoE feed-forward. forward(x: tokens x dim, bf16) -> tokens x dim (fp32). Counts the
        tokens routed to each expert into self.load (training forwards only)."""

        def __init__(self, config, activation_dtype, use_grouped_mm):
            super().__init__()
            E, D, Fh, S = config.num_experts, config.dim, config.expert_hidden, config.shared_hidden
            self.E, self.k, self.F, self.S = E, config.top_k, Fh, S
            self.activation_dtype, self.use_grouped_mm = activation_dtype, use_grouped_mm
            self.router = torch.nn.Parameter(torch.empty(E, D))
            self.experts_w13 = torch.nn.Parameter(torch.empty(E, 2 * Fh, D))
            self.experts_w2 = torch.nn.Parameter(torch.empty(E, D, Fh))
            self.shared_w13 = torch.nn.Parameter(torch.empty(2 * S, D)) if S else None
            self.shared_w2 = torch.nn.Parameter(torch.empty(D, S)) if S else None
            self.register_buffer("router_bias", torch.zeros(E))  # selection only; moved by balance_step
            self.register_buffer("load", torch.zeros(E))

        def route(self, x):
            with torch.autocast(x.device.type, enabled=False):  # bf16 operands, fp32 products (bfp8_gemm_bf16)
                logits = F.linear(x.to(torch.bfloat16).float(), self.router.to(torch.bfloat16).float())
            scores = torch.sigmoid(logits)
            with torch.no_grad():
                chosen = torch.topk(scores + self.router_bias, self.k, dim=-1).indices
            weights = scores.gather(-1, chosen)
            weights = weights / weights.sum(-1, keepdim=True)
            return chosen, weights

        def swiglu(self, gu):
            gate, up = gu.float().split(gu.shape[-1] // 2, dim=-1)
            return (F.silu(gate) * up).to(self.activation_dtype)

        def experts_grouped(self, x, chosen):
            """Every (token, expert) pair through its expert: rows of an expert contiguous, runs padded to
            GROUP_ALIGN rows, a static row count (no data-dependent shapes: compiles fullgraph)."""
            T, k, E = x.shape[0], self.k, self.E
            flat = chosen.reshape(-1)
            counts = torch.bincount(flat, minlength=E)
            padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
            ends = torch.cumsum(padded, 0)
            order = torch.argsort(flat, stable=True)
            expert_of = flat[order]
            rank = torch.arange(T * k, device=x.device) - (torch.cumsum(counts, 0) - counts)[expert_of]
            row = (ends - padded)[expert_of] + rank
            rows = T * k + E * (GROUP_ALIGN - 1)
            xp = x.new_zeros(rows, x.shape[1]).index_copy(0, row, x[order // k])
            offs = ends.to(torch.int32)
            w13 = self.experts_w13.to(torch.bfloat16).transpose(-2, -1)
            w2 = self.experts_w2.to(torch.bfloat16).transpose(-2, -1)
            h = self.swiglu(torch._grouped_mm(xp, w13, offs=offs))
            yp = torch._grouped_mm(h, w2, offs=offs)
            ys = torch.empty_like(yp[:T * k]).index_copy(0, order, yp[row])
            return ys.view(T, k, -1), counts

        def experts_loop(self, x, chosen):
            T, k = x.shape[0], self.k
            flat = chosen.reshape(-1)
            ys = x.new_zeros(T * k, x.shape[1])
            for e in range(self.E):
                slots = (flat == e).nonzero().squeeze(-1)
                if slots.numel() == 0:
                    continue
                h = self.swiglu(F.linear(x[slots // k], self.experts_w13[e].to(torch.bfloat16)))
                ys = ys.index_copy(0, slots, F.linear(h, self.experts_w2[e].to(torch.bfloat16)))
            return ys.view(T, k, -1), torch.bincount(flat, minlength=self.E)

        def forward(self, x):
            x = x.to(torch.bfloat16)
            chosen, weights = self.route(x)
            run = self.experts_grouped if self.use_grouped_mm else self.experts_loop
            ys, counts = run(x, chosen)
            if self.training:
                with torch.no_grad():
                    self.load.add_(counts.float())
            y = (ys.float() * weights[..., None]).sum(1)
            if self.S:
                h = self.swiglu(F.linear(x, self.shared_w13.to(torch.bfloat16)))
                y = y + F.linear(h, self.shared_w2.to(torch.bfloat16)).float()
            return y

        @torch.no_grad()
        def balance_step(self, rate):
            """model_moe_balance_step: the busiest expert's load over the mean; the bias moved by rate towards
            the mean load; the counts restarted."""
            total = self.load.sum()
            mean = total / self.E
            ratio = (self.load.max() / mean) if total > 0 else torch.zeros((), device=self.load.device)
            if total > 0:
                self.router_bias.add_(rate * torch.sign(mean - self.load))
            self.load.zero_()
            return ratio

    class MoeBlock(torch.nn.Module):
        def __init__(self, config, activation_dtype, use_grouped_mm):
            super().__init__()
            self.attn_norm = llama.RMSNorm(config.dim, config.norm_eps, activation_dtype)
            self.attn = llama.Attention(config)
            self.mlp_norm = llama.RMSNorm(config.dim, config.norm_eps, activation_dtype)
            self.moe = MoE(config, activation_dtype, use_grouped_mm)

        def forward(self, x, cos, sin):
            h = x + self.attn(self.attn_norm(x), cos, sin)
            batch, seq, dim = h.shape
            return h + self.moe(self.mlp_norm(h).reshape(batch * seq, dim)).view(batch, seq, dim)

    class MoeModel(llama.Llama):
        """llama.Llama with the MoE blocks from config.dense_layers on."""

        def __init__(self, config, activation_dtype=torch.bfloat16, use_grouped_mm=True):
            torch.nn.Module.__init__(self)
            self.config = config
            self.tok_emb = torch.nn.Embedding(config.vocab_size, config.dim)
            self.layers = torch.nn.ModuleList(
                llama.Block(config, activation_dtype) if i < config.dense_layers else
                MoeBlock(config, activation_dtype, use_grouped_mm) for i in range(config.n_layers))
            self.final_norm = llama.RMSNorm(config.dim, config.norm_eps, activation_dtype)
            self.head = torch.nn.Linear(config.dim, config.vocab_size, bias=False)
            cos, sin = llama.rope_tables(config)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
            self.reset_parameters()

        def moe_layers(self):
            return [b.moe for b in self.layers if isinstance(b, MoeBlock)]

    return MoeModel, grouped_mm_works


def is_residual(name):
    """model_init_weights: attn.out, mlp.down and every expert's down (*_w2) are residual projections."""
    return name.endswith("attn.out.weight") or name.endswith("mlp.down.weight") or name.endswith("_w2")


def init_weights(model, seed, c_trainer, torch, llama, chunk=1 << 24):
    """model_init_weights' scheme (one N(0, std) stream over the matrices in parameter order, norms 1);
    c_trainer: the C trainer's splitmix64 numbers for seed (llama._splitmix_normals), else torch's RNG."""
    std = 0.02
    residual_std = std / math.sqrt(2 * model.config.n_layers)
    state0 = (seed ^ 0x243F6A8885A308D3) & llama._MASK64
    gen = None if c_trainer else torch.Generator(device=model.head.weight.device).manual_seed(seed)
    draw = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            scale = residual_std if is_residual(name) else std
            if not c_trainer:
                p.normal_(0.0, scale, generator=gen)
                continue
            flat = p.view(-1)
            for start in range(0, flat.numel(), chunk):
                n = min(chunk, flat.numel() - start)
                flat[start:start + n] = llama._splitmix_normals(state0, draw, n, p.device) * torch.tensor(
                    scale, dtype=torch.float32, device=p.device)
                draw += 2 * n
        for moe in model.moe_layers():
            moe.router_bias.zero_()
            moe.load.zero_()


# --------------------------------------------------------------------------
# One mode, in this process

def run_mode(args, mode):
    import torch
    import llama
    from llama_e2e import Batches, load_tokens, run_steps_timed

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    config = PRESETS[args.preset]
    if args.vocab_size:
        import dataclasses
        config = dataclasses.replace(config, vocab_size=args.vocab_size)
    defaults = TRAIN_DEFAULTS[args.preset]
    batch = args.batch or defaults["batch"]
    seq = args.seq or config.max_seq
    lr = args.lr if args.lr is not None else defaults["lr"]
    warmup = args.warmup if args.warmup is not None else default_warmup(args.preset, args.steps)
    torch.backends.cuda.matmul.allow_tf32 = False
    MoeModel, grouped_mm_works = build_classes(torch, llama)
    if args.experts == "loop":
        use_grouped = False
    else:
        use_grouped = grouped_mm_works(device)
        if args.experts == "grouped-mm" and not use_grouped:
            raise RuntimeError("torch._grouped_mm is missing or fails on %s (torch %s)" % (device, torch.__version__))
    experts = "grouped_mm" if use_grouped else "loop"
    tokens = load_tokens(args, config.vocab_size, device, torch)
    data = Batches(tokens, batch, seq, args.steps, args.seed, torch)
    model = MoeModel(config, use_grouped_mm=use_grouped).to(device)
    init_weights(model, args.seed, args.init == "c-trainer", torch, llama)
    forward = model
    if mode.endswith("compile"):
        for block in model.layers:  # the loop over experts has data-dependent shapes: graph breaks allowed
            block.compile(fullgraph=use_grouped, backend="inductor")
        model.output = torch.compile(model.output, fullgraph=True, backend="inductor")
    optimizer = llama.make_optimizer(model, lr, fused=cuda)
    params = [p for p in model.parameters()]
    moes = model.moe_layers()
    print("%s: %s, %.1fM params, %.1fM active, experts by %s, batch %d x %d, lr %g, warmup %d, %d steps" % (
        mode, args.preset, sum(p.numel() for p in params) / 1e6, config.active_params() / 1e6, experts, batch, seq,
        lr, warmup, args.steps), flush=True)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def step(i):
        for group in optimizer.param_groups:
            group["lr"] = llama.lr_at_step(i, warmup, args.steps, lr, lr / 10)
        inputs, targets = data.train(i)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = forward(inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        load = torch.stack([m.balance_step(config.bias_update_rate) for m in moes]).max()
        return loss.detach(), norm.detach(), load

    def log(i, out):
        if i % args.log_every == 0:
            print("step %5d | loss %.4f | load %.2f" % (i, out[0].item(), out[2].item()), flush=True)

    outputs, first_steps_s, timed_s, train_s = run_steps_timed(torch, step, args.steps, args.timed_from, cuda, log)
    losses, norms, loads = ([float(v) for v in torch.stack([o[k] for o in outputs]).float().cpu().tolist()]
                            for k in range(3))
    for i in range(args.timed_from, args.steps + 1):  # the timed steps' lines, printed after the timing
        if i % args.log_every == 0 or i == args.steps:
            print("step %5d | loss %.4f | load %.2f" % (i, losses[i - 1], loads[i - 1]))
    peak = torch.cuda.max_memory_allocated() if cuda else 0

    val = []
    for inputs, targets in data.validation(args.eval_batches, torch):
        with torch.autocast(device.type, dtype=torch.bfloat16):  # grad mode as in training: no recompile
            val.append(forward(inputs, targets).detach().float())
    val_loss = torch.stack(val).mean().item() if val else float("nan")
    timed_steps = args.steps - args.timed_from + 1
    last = losses[-10:]
    return {
        "mode": mode, "preset": args.preset, "params": sum(p.numel() for p in params),
        "active_params": config.active_params(), "experts": experts, "batch": batch, "seq": seq,
        "steps": args.steps, "lr": lr, "warmup": warmup, "seed": args.seed, "init": args.init,
        "data": "synthetic" if args.synthetic else os.path.basename(args.tokens),
        "tokens_per_s": batch * seq * timed_steps / timed_s, "step_ms": 1e3 * timed_s / timed_steps,
        "timed_steps": timed_steps, "first_steps_s": first_steps_s, "train_s": round(train_s, 1),
        "peak_memory_gib": peak / 2 ** 30, "train_loss": sum(last) / len(last), "val_loss": val_loss,
        "final_load": loads[-1], "losses": [round(v, 5) for v in losses], "loads": [round(v, 3) for v in loads],
        "grad_norms": [round(v, 4) for v in norms],
        "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
    }


# --------------------------------------------------------------------------
# The driver: every mode in its own process, then the comparison

def report(results, out=sys.stdout):
    by = {r["mode"]: r for r in results if "error" not in r}
    print("\n%-14s %11s %9s %10s %11s %9s %6s  %s" % ("mode", "tokens/s", "step ms", "peak GiB", "train loss",
                                                      "val loss", "load", "experts"), file=out)
    for r in results:
        if "error" in r:
            print("%-14s FAILED: %s" % (r["mode"], r["error"]), file=out)
            continue
        print("%-14s %11.0f %9.1f %10.1f %11.4f %9.4f %6.2f  %s" % (
            r["mode"], r["tokens_per_s"], r["step_ms"], r["peak_memory_gib"], r["train_loss"], r["val_loss"],
            r["final_load"], r["experts"]), file=out)
    ratios = {}
    if "bf16-compile" in by and "bf16-eager" in by:
        ratios["bf16-compile / bf16-eager"] = by["bf16-compile"]["tokens_per_s"] / by["bf16-eager"]["tokens_per_s"]
        print("tokens/s bf16-compile / bf16-eager %.3fx" % ratios["bf16-compile / bf16-eager"], file=out)
    return ratios


def summary(mode, r):
    return ("%s: %.0f tokens/s, step %.1f ms (first steps %s s), peak %.1f GiB, train loss %.4f, val loss %.4f, "
            "load %.2f, experts by %s" % (mode, r["tokens_per_s"], r["step_ms"], r["first_steps_s"],
                                          r["peak_memory_gib"], r["train_loss"], r["val_loss"], r["final_load"],
                                          r["experts"]))


def main():
    from llama_e2e import drive  # (this script's folder is on the path)
    return drive(parse_args(), run_mode, summary, report, "moe_e2e")


if __name__ == "__main__":
    sys.exit(main())
