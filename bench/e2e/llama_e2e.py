"""llama_e2e.py - end-to-end training of the C trainer's Llama-style model
(bench/e2e/llama.py, default the 1b preset: 956M parameters, batch 8 x seq
2048) in PyTorch, one run per mode, each in its own process:

    bf16-eager        nn.Linear under torch.autocast(bf16)
    bf16-compile      the same, torch.compile
    torchao-compile   torchao's Float8BlockwiseLinear (torchao.prototype.
                      blockwise_fp8_training, quantize_ with
                      Float8BlockwiseLinearConfig), torch.compile
    torchao-eager     the same, eager
    blockfp8-eager    blockfp8.torch.convert_to_float8_blockwise_training
    blockfp8-compile  the same, torch.compile

Every mode converts the same linear layers (all but the head: attention
q/k/v and output, SwiGLU gate/up and down), starts from the same weights
(the C trainer's for --seed, init_like_c_trainer) and trains on the same
batches with the C trainer's optimizer and schedule (AdamW 0.9/0.95, wd 0.1
not on norms, clip 1.0, warmup then cosine to lr/10 over --steps). torch.compile
compiles each transformer block (fullgraph but for torchao's layer, whose
scaled_mm dynamo cannot trace; the 16 blocks share one compiled
graph) and the output (final norm, head, cross-entropy), as torchtitan does.

Per mode it prints tokens/s over the steady steps (from --timed-from on,
CUDA events around them, no synchronization inside), the peak memory
(torch.cuda.max_memory_allocated) and the GPU memory the run holds at its
end (in use less before the model: the caching allocator's reserve and
CUDA's own included, as blockfp8 train's "device memory"), the training loss (mean of the last 10
steps) and the validation loss after the run (--eval-batches fixed batches
of the last 5% of the tokens); then the ratios against bf16-compile and
torchao-compile, and blockfp8's loss against bf16's.

    python3 bench/e2e/llama_e2e.py --tokens .carry/e2e/corpus-32768.u16 [--steps 200] \\
        [--modes bf16-compile,torchao-compile,blockfp8-compile] [--json out.json]
    python3 bench/e2e/llama_e2e.py --synthetic ...     random tokens (throughput only)
    python3 bench/e2e/llama_e2e.py --preset tiny --device cpu --synthetic --steps 3   (a smoke run)

Tokens: a raw little-endian uint16 file of token ids (prepare_tokens.sh).
Exit code: 0 when every mode ran, 1 otherwise.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "python"))

MODES = ("bf16-eager", "bf16-compile", "torchao-eager", "torchao-compile", "blockfp8-eager", "blockfp8-compile")
DEFAULT_MODES = "bf16-compile,torchao-compile,blockfp8-compile"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--modes", default=DEFAULT_MODES, help="comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--preset", default="1b", help="tiny, small, medium, large, 1b (src/model/model_config.c)")
    p.add_argument("--vocab-size", type=int, default=None, help="another vocabulary (default: the preset's)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default: the preset's)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the preset's context)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    p.add_argument("--timed-from", type=int, default=21, help="first step of the throughput window (default 21)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the preset's)")
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: the trainer's rule)")
    p.add_argument("--seed", type=int, default=1337, help="weights (the C trainer's init) and batch order")
    p.add_argument("--init", choices=("c-trainer", "torch"), default="c-trainer",
                   help="c-trainer: the C trainer's very initial weights (default); torch: its scheme, torch's RNG")
    p.add_argument("--tokens", default=None, help="uint16 token file")
    p.add_argument("--synthetic", action="store_true", help="uniform random tokens instead of --tokens")
    p.add_argument("--eval-batches", type=int, default=4, help="validation batches after the run (default 4)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--compile-scope", choices=("block", "model"), default="block",
                   help="block: each block and the output compiled (default); model: the whole model")
    p.add_argument("--json", default=None, help="write the results here (JSON)")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the run, N more steps under torch.profiler: CUDA time per kernel, the top 30")
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
# One mode, in this process

def load_tokens(args, vocab, device, torch):
    if args.synthetic:
        gen = torch.Generator().manual_seed(args.seed + 7)
        return torch.randint(0, vocab, (1 << 22,), generator=gen).to(device)
    import numpy as np
    ids = np.fromfile(args.tokens, dtype="<u2").astype(np.int64)
    if ids.size == 0 or int(ids.max()) >= vocab:
        raise SystemExit("%s: %d tokens, largest id %d: not a token file of a %d-token vocabulary" % (
            args.tokens, ids.size, int(ids.max()) if ids.size else -1, vocab))
    return torch.from_numpy(ids).to(device)


class Batches:
    """Training windows drawn from the first 95% of the tokens (the same for
    every mode: one CPU generator from the seed), validation windows evenly
    spaced over the last 5%."""

    def __init__(self, tokens, batch, seq, steps, seed, torch):
        self.tokens, self.batch, self.seq = tokens, batch, seq
        n = tokens.numel()
        self.split = int(n * 0.95)
        if self.split < seq + 2 or n - self.split < seq + 2:
            raise SystemExit("%d tokens: too few for windows of %d" % (n, seq + 1))
        gen = torch.Generator().manual_seed(seed)
        self.starts = torch.randint(0, self.split - seq - 1, (steps, batch), generator=gen).to(tokens.device)
        self.offsets = torch.arange(seq + 1, device=tokens.device)

    def _windows(self, starts):
        w = self.tokens[starts[:, None] + self.offsets[None, :]]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def train(self, step):
        return self._windows(self.starts[step - 1])

    def validation(self, count, torch):
        room = self.tokens.numel() - self.split - self.seq - 1
        total = count * self.batch
        starts = self.split + (torch.arange(total, device=self.tokens.device) * room) // max(1, total)
        return [self._windows(starts[i * self.batch:(i + 1) * self.batch]) for i in range(count)]


def build_model(args, mode, config, device, torch, llama):
    model = llama.Llama(config).to(device)
    if args.init == "c-trainer":
        llama.init_like_c_trainer(model, args.seed)
    else:
        model.reset_parameters(torch.Generator(device=device).manual_seed(args.seed))

    def not_head(module, fqn):
        return isinstance(module, torch.nn.Linear) and fqn != "head"

    if mode.startswith("torchao"):
        from torchao.prototype.blockwise_fp8_training.linear import Float8BlockwiseLinearConfig
        from torchao.quantization import quantize_
        quantize_(model, Float8BlockwiseLinearConfig(), filter_fn=not_head)
    elif mode.startswith("blockfp8"):
        import blockfp8.torch as bft
        bft.convert_to_float8_blockwise_training(model, module_filter_fn=not_head)
    forward = model
    if mode.endswith("compile"):
        backend = "inductor"
        # torchao's layer calls torch._scaled_mm_v2, which dynamo cannot trace in
        # torch 2.11: its blocks compile with graph breaks around those calls
        fullgraph = not mode.startswith("torchao")
        if args.compile_scope == "model":
            forward = torch.compile(model, fullgraph=fullgraph, backend=backend)
        else:
            for block in model.layers:
                block.compile(fullgraph=fullgraph, backend=backend)
            model.output = torch.compile(model.output, fullgraph=fullgraph, backend=backend)
    return model, forward


def run_mode(args, mode):
    import torch
    import llama

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    config = llama.PRESETS[args.preset]
    if args.vocab_size:
        import dataclasses
        config = dataclasses.replace(config, vocab_size=args.vocab_size)
    defaults = llama.TRAIN_DEFAULTS[args.preset]
    batch = args.batch or defaults["batch"]
    seq = args.seq or config.max_seq
    lr = args.lr if args.lr is not None else defaults["lr"]
    warmup = args.warmup if args.warmup is not None else llama.default_warmup(args.preset, args.steps)
    torch.backends.cuda.matmul.allow_tf32 = False
    tokens = load_tokens(args, config.vocab_size, device, torch)
    data = Batches(tokens, batch, seq, args.steps, args.seed, torch)
    if cuda:  # the GPU's memory in use before the model (CUDA's own included), as blockfp8 train measures it
        free, total = torch.cuda.mem_get_info(device)
        in_use_before = total - free
    model, forward = build_model(args, mode, config, device, torch, llama)
    optimizer = llama.make_optimizer(model, lr, fused=cuda)
    params = [p for p in model.parameters()]
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
        return loss.detach(), norm.detach()

    outputs, first_steps_s, timed_s, train_s = run_steps_timed(torch, step, args.steps, args.timed_from, cuda)
    losses = torch.stack([o[0] for o in outputs]).float().cpu().tolist()
    norms = torch.stack([o[1] for o in outputs]).float().cpu().tolist()
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    in_use = 0  # what the run holds on the GPU at the end (the caching allocator's reserve, modules, workspaces)
    if cuda:
        free, total = torch.cuda.mem_get_info(device)
        in_use = total - free - in_use_before

    if args.profile_steps > 0:
        profile_kernels(torch, step, args.steps, args.profile_steps, cuda)

    val = []
    for inputs, targets in data.validation(args.eval_batches, torch):
        with torch.autocast(device.type, dtype=torch.bfloat16):  # grad mode as in training: no recompile
            val.append(forward(inputs, targets).detach().float())
    val_loss = torch.stack(val).mean().item() if val else float("nan")
    nonfinite = []
    if mode.startswith("blockfp8"):
        import blockfp8.torch as bft
        nonfinite = sorted({n for m in model.modules() if isinstance(m, bft.Float8BlockwiseLinear)
                            for n in m.nonfinite()})
    timed_steps = args.steps - args.timed_from + 1
    last = losses[-10:]
    return {
        "mode": mode, "preset": args.preset, "params": sum(p.numel() for p in params), "batch": batch, "seq": seq,
        "steps": args.steps, "lr": lr, "warmup": warmup, "seed": args.seed, "init": args.init,
        "data": "synthetic" if args.synthetic else os.path.basename(args.tokens),
        "tokens_per_s": batch * seq * timed_steps / timed_s, "step_ms": 1e3 * timed_s / timed_steps,
        "timed_steps": timed_steps, "first_steps_s": first_steps_s, "train_s": round(train_s, 1),
        "peak_memory_gib": peak / 2 ** 30, "device_memory_mb": in_use / 1e6,
        "train_loss": sum(last) / len(last), "val_loss": val_loss,
        "losses": [round(v, 5) for v in losses], "grad_norms": [round(v, 4) for v in norms],
        "nonfinite": nonfinite, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
    }


def run_steps_timed(torch, step, steps, timed_from, cuda, log=None):
    """step(i) for i = 1..steps, steps timed_from..steps timed by CUDA events (the wall clock on the CPU), no
    synchronization among them. Returns each step's outputs (left on the device), the first three steps' seconds
    (each synchronized), the timed seconds and the whole loop's. log(i, outputs) is called for the steps before
    timed_from only (printing a value synchronizes)."""
    outputs, first_steps_s = [], []
    timer, wall = None, time.perf_counter()
    for i in range(1, steps + 1):
        if i == timed_from:
            if cuda:
                timer = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                timer[0].record()
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        outputs.append(step(i))
        if i <= 3:
            if cuda:
                torch.cuda.synchronize()
            first_steps_s.append(round(time.perf_counter() - t0, 2))
        if log and i < timed_from:
            log(i, outputs[-1])
    if cuda:
        timer[1].record()
        timer[1].synchronize()
        timed_s = timer[0].elapsed_time(timer[1]) / 1e3
    else:
        timed_s = time.perf_counter() - t_start
    return outputs, first_steps_s, timed_s, time.perf_counter() - wall


def profile_kernels(torch, step, last_step, count, cuda):
    """count more steps (at the schedule's last learning rate) under torch.profiler; prints the kernels by
    total CUDA time, per step."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(count):
            step(last_step)
        if cuda:
            torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    rows.sort(key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in rows) / count / 1e3
    print("profile: %d steps, %.1f ms of kernels a step" % (count, total))
    for e in rows[:30]:
        print("  %8.2f ms %5.1f%% %5d  %s" % (e.device_time_total / count / 1e3, 100 * e.device_time_total / count /
                                              1e3 / total, e.count // count, e.key[:110]))
    sys.stdout.flush()


# --------------------------------------------------------------------------
# The driver: every mode in its own process, then the comparison

def report(results, out=sys.stdout):
    by = {r["mode"]: r for r in results if "error" not in r}
    print("\n%-17s %11s %9s %10s %10s %11s %9s" % ("mode", "tokens/s", "step ms", "peak GiB", "in use MB", "train loss",
                                                  "val loss"), file=out)
    for r in results:
        if "error" in r:
            print("%-17s FAILED: %s" % (r["mode"], r["error"]), file=out)
            continue
        print("%-17s %11.0f %9.1f %10.1f %10.0f %11.4f %9.4f" % (r["mode"], r["tokens_per_s"], r["step_ms"],
                                                              r["peak_memory_gib"], r.get("device_memory_mb", 0),
                                                              r["train_loss"], r["val_loss"]), file=out)
    ratios = {}
    for fp8 in ("blockfp8-compile", "blockfp8-eager", "torchao-compile"):
        for base in ("bf16-compile", "torchao-compile", "bf16-eager"):
            if fp8 in by and base in by and fp8 != base:
                ratios["%s / %s" % (fp8, base)] = by[fp8]["tokens_per_s"] / by[base]["tokens_per_s"]
    for name, value in ratios.items():
        print("tokens/s %-38s %.3fx" % (name, value), file=out)
    for fp8 in ("blockfp8-compile", "blockfp8-eager", "torchao-compile"):
        base = "bf16-compile" if "bf16-compile" in by else "bf16-eager"
        if fp8 in by and base in by:
            for kind in ("train_loss", "val_loss"):
                rel = (by[fp8][kind] - by[base][kind]) / by[base][kind]
                ratios["%s %s vs %s" % (kind, fp8, base)] = rel
                print("%-10s %-16s vs %-12s %+.2f%%" % (kind, fp8, base, 100 * rel), file=out)
    return ratios


def drive(args, run_mode, summary, report, stem):
    """The driver of an end-to-end bench (this file's, moe_e2e.py's): in a child (--mode-json), run_mode(args,
    mode) of its one mode into that file; else every mode of --modes in a process of its own (in this one with
    --in-process), summary(mode, result) printed for each, report(results) at the end, --json written. Exit
    code 0 when every mode ran and ended with a finite loss and no non-finite value."""
    if args.mode_json:  # a child: one mode
        mode = args.modes
        try:
            result = run_mode(args, mode)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            result = {"mode": mode, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
        with open(args.mode_json, "w") as f:
            json.dump(result, f)
        return 0 if "error" not in result else 1
    results = []
    for mode in args.modes.split(","):
        print("=== %s" % mode, flush=True)
        start = time.perf_counter()
        if args.in_process:
            try:
                result = run_mode(args, mode)
            except Exception as e:  # noqa: BLE001
                result = {"mode": mode, "error": "%s: %s" % (type(e).__name__, e)}
        else:
            path = "%s.%s.%d.json" % (args.json or os.path.join("/tmp", stem), mode, os.getpid())
            child, rest = [], iter(sys.argv[1:])
            for a in rest:  # every argument but --modes
                if a == "--modes":
                    next(rest, None)
                elif not a.startswith("--modes="):
                    child.append(a)
            child = [sys.executable, os.path.abspath(sys.argv[0]), "--modes", mode, "--mode-json", path] + child
            rc = subprocess.call(child)
            try:
                with open(path) as f:
                    result = json.load(f)
                os.remove(path)
            except (OSError, ValueError):
                result = {"mode": mode, "error": "the process ended with exit code %d and no result" % rc}
        if "error" not in result:
            print("%s, %.0f s in all" % (summary(mode, result), time.perf_counter() - start), flush=True)
        else:
            print("%s: FAILED: %s" % (mode, result["error"]), flush=True)
        results.append(result)
    ratios = report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "ratios": ratios}, f, indent=1)
    return 0 if all("error" not in r and not r.get("nonfinite") and math.isfinite(r["train_loss"])
                    for r in results) else 1


def summary(mode, r):
    return ("%s: %.0f tokens/s, step %.1f ms (first steps %s s), peak %.1f GiB, train loss %.4f, val loss %.4f%s"
            % (mode, r["tokens_per_s"], r["step_ms"], r["first_steps_s"], r["peak_memory_gib"], r["train_loss"],
               r["val_loss"], (", NON-FINITE: %s" % r["nonfinite"]) if r["nonfinite"] else ""))


def main():
    return drive(parse_args(), run_mode, summary, report, "llama_e2e")


if __name__ == "__main__":
    sys.exit(main())
