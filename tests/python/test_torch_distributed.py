"""test_torch_distributed.py - blockfp8.torch layers under DDP and FSDP2
(fully_shard) in a one-process group: gloo over CPU tensors, or with --cuda
NCCL over CUDA tensors:

    BLOCKFP8_LIBRARY=build/libblockfp8.so python3 tests/python/test_torch_distributed.py [--cuda]

The Llama-style model of bench/e2e (a small shape), its linear layers
converted by convert_to_float8_blockwise_training, trains 3 AdamW steps:
- under DDP: the same losses and weights as without it, bit for bit;
- under FSDP2 (each block and the root sharded): the same, bit for bit;
- under FSDP2 with bf16 parameters (MixedPrecisionPolicy): the layers take
  the gathered bf16 weights; losses within 2% of the fp32 run;
- under FSDP2 with each block compiled (torch.compile fullgraph: AOT autograd
  on the CPU, inductor with --cuda): the losses of the eager FSDP2 run.
The multi-process runs are another test's.
Exit code: 0 passed, 1 a failure, 77 skipped (no torch or no torch.distributed; --cuda: no GPU).
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "bench", "e2e"))

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)
ON_CUDA = "--cuda" in sys.argv[1:]
if ON_CUDA and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
if not dist.is_available():
    print("SKIP: torch.distributed is not available")
    sys.exit(77)

import blockfp8 as bf  # noqa: E402
import blockfp8.torch as bft  # noqa: E402
import llama  # noqa: E402
from checklist import Checklist  # noqa: E402

if ON_CUDA and bf.cuda_device_count() < 1:
    print("SKIP: libblockfp8 sees no CUDA device (built without CUDA?)")
    sys.exit(77)

check = Checklist("test_torch_distributed")
dev = torch.device("cuda", 0) if ON_CUDA else torch.device("cpu")
SMALL = llama.LlamaConfig(vocab_size=512, dim=256, n_layers=2, n_heads=4, ffn_hidden=384, max_seq=128)
STEPS = 3


def make_model():
    torch.manual_seed(0)
    model = llama.Llama(SMALL).to(dev)
    bft.convert_to_float8_blockwise_training(model, module_filter_fn=lambda m, fqn: fqn != "head")
    return model


def batches():
    gen = torch.Generator().manual_seed(4)
    out = []
    for _ in range(STEPS):
        tokens = torch.randint(0, SMALL.vocab_size, (2, SMALL.max_seq + 1), generator=gen)
        out.append((tokens[:, :-1].to(dev), tokens[:, 1:].to(dev)))
    return out


def train(model, forward=None):
    """STEPS AdamW steps; returns the losses and the final weights (full tensors)."""
    forward = forward or model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for tokens, targets in batches():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = forward(tokens, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    weights = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        weights[name.replace("module.", "").replace("_orig_mod.", "")] = full.detach().float().cpu()
    flags = [m for m in model.modules() if isinstance(m, bft.Float8BlockwiseLinear)]
    check(all(m.nonfinite() == [] for m in flags), "non-finite flags raised on finite data")
    return losses, weights


def same(label, ref, got, exact=True, tolerance=0.0):
    (ref_losses, ref_weights), (losses, weights) = ref, got
    if exact:
        ok = ref_losses == losses and ref_weights.keys() == weights.keys() and all(
            torch.equal(ref_weights[k], weights[k]) for k in ref_weights)
    else:
        ok = all(abs(a - b) <= tolerance * abs(a) for a, b in zip(ref_losses, losses))
    check(ok, "%s: losses %s, without it %s" % (label, losses, ref_losses))
    print("%-32s losses %s" % (label, " ".join("%.5f" % v for v in losses)))


def main():
    backend = "nccl" if ON_CUDA else "gloo"
    if ON_CUDA:
        torch.cuda.set_device(0)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.nn.parallel import DistributedDataParallel as DDP

        reference = train(make_model())
        print("%-32s losses %s" % ("single process", " ".join("%.5f" % v for v in reference[0])))

        model = make_model()
        ddp = DDP(model, device_ids=[0] if ON_CUDA else None)
        same("DDP", reference, train(ddp))

        mesh = init_device_mesh(dev.type, (1,))

        def sharded(policy=None, compiled=False):
            model = make_model()
            kwargs = {"mesh": mesh}
            if policy is not None:
                kwargs["mp_policy"] = policy
            for block in model.layers:
                if compiled:
                    block.compile(fullgraph=True, backend="inductor" if ON_CUDA else "aot_eager")
                fully_shard(block, **kwargs)
            fully_shard(model, **kwargs)
            return model

        fsdp = sharded()
        check(type(fsdp.layers[0].attn.qkv.weight).__name__ == "DTensor", "FSDP2: the weights are not sharded")
        fsdp_run = train(fsdp)
        same("FSDP2", reference, fsdp_run)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        same("FSDP2, bf16 parameters", reference, train(sharded(policy)), exact=False, tolerance=0.02)
        same("FSDP2, blocks compiled", fsdp_run, train(sharded(compiled=True)), exact=False, tolerance=1e-3)
    finally:
        dist.destroy_process_group()
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
