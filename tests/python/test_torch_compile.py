"""test_torch_compile.py - blockfp8.torch under torch.compile, on CPU tensors
(the CPU backend) or, with --cuda, CUDA tensors:

    BLOCKFP8_LIBRARY=build/libblockfp8.so python3 tests/python/test_torch_compile.py [--cuda]

- every custom operator (torch.ops.blockfp8.*) through torch.library.opcheck:
  schema, fake implementation (shapes, dtypes, strides) against the real
  one, AOT tracing with static and dynamic shapes;
- the Llama-style model of bench/e2e (a small shape) converted by
  convert_to_float8_blockwise_training (all linear layers but the head):
  the parameters are the nn.Linear's own objects, the state dict is the
  unconverted model's, a bf16 checkpoint loads into it and back;
- torch._dynamo.explain of its forward + loss: one graph, no graph break;
  torch.compile(fullgraph=True) forward and backward (AOT autograd; with
  --cuda through inductor, and mode="reduce-overhead": CUDA graphs) against
  eager: the same loss and gradients, the blockfp8 operators in both the
  forward and the backward graph;
- Float8BlockwiseLinear alone through inductor, with dynamic shapes;
- the mixture-of-experts layer (offsets as a list and as a tensor) compiled
  with fullgraph, against eager.
Exit code: 0 passed, 1 a failure, 77 skipped (no torch; --cuda: no GPU).
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "bench", "e2e"))

try:
    import torch
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)
ON_CUDA = "--cuda" in sys.argv[1:]
if ON_CUDA and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)

import blockfp8 as bf  # noqa: E402
import blockfp8.torch as bft  # noqa: E402
import llama  # noqa: E402
from blockfp8.torch import ops  # noqa: E402
from checklist import Checklist  # noqa: E402

if ON_CUDA and bf.cuda_device_count() < 1:
    print("SKIP: libblockfp8 sees no CUDA device (built without CUDA?)")
    sys.exit(77)

check = Checklist("test_torch_compile")
dev = torch.device("cuda", 0) if ON_CUDA else torch.device("cpu")
SMALL = llama.LlamaConfig(vocab_size=512, dim=256, n_layers=2, n_heads=4, ffn_hidden=384, max_seq=128)


def expect(what, fn):
    """Run fn; a raised exception is a failed check (named), not a crash."""
    try:
        fn()
        return True
    except Exception as e:  # noqa: BLE001
        check(False, "%s: %s: %s" % (what, type(e).__name__, " ".join(str(e).split("\n")[:4])))
        return False


def test_opcheck():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(200, 300, generator=gen).to(dev)
    w = torch.randn(260, 300, generator=gen).to(dev)
    dy = torch.randn(200, 260, generator=gen).to(dev)
    flag = torch.zeros(1, dtype=torch.int32, device=dev)
    cases = [
        ("quantize_1x128 f32 both", ops.quantize_1x128, (x, True, True, False, flag)),
        ("quantize_1x128 bf16 rows pow2", ops.quantize_1x128, (x.bfloat16(), True, False, True, None)),
        ("quantize_1x128 strided rows", ops.quantize_1x128, (x[:, :256], False, True, False, None)),
        ("quantize_128x128 both", ops.quantize_128x128, (w, True, False, flag)),
        ("quantize_128x128 bf16", ops.quantize_128x128, (w.bfloat16(), False, True, None)),
    ]
    qa, sa, qat, sat = ops.quantize_1x128(x, True, True, False, None)
    qb, sb, qbt, sbt = ops.quantize_128x128(w, True, False, None)
    _, _, qdyt, sdyt = ops.quantize_1x128(dy, False, True, False, None)
    cases += [
        ("gemm_1d2d bf16", ops.gemm_1d2d, (qa, sa, qb, sb, 300, torch.bfloat16)),
        ("gemm_1d2d f32", ops.gemm_1d2d, (qa, sa, qb, sb, 300, torch.float32)),
        ("gemm_1d1d", ops.gemm_1d1d, (qdyt, sdyt, qat, sat, 200, torch.float32)),
    ]
    offsets = [0, 128, 128, 384]
    xg = torch.randn(512, 256, generator=gen).to(dev)
    wg = torch.randn(3 * 128, 256, generator=gen).to(dev)
    dyg = torch.randn(512, 128, generator=gen).to(dev)
    qx, sx, qxt, sxt = ops.quantize_1x128(xg, True, True, False, None)
    qw, sw, _, _ = ops.quantize_128x128(wg, False, False, None)
    _, _, qdt, sdt = ops.quantize_1x128(dyg, False, True, False, None)
    table = torch.tensor(offsets, dtype=torch.int64, device=dev)
    cases += [
        ("gemm_1d2d_grouped", ops.gemm_1d2d_grouped, (qx, sx, qw, sw, 256, offsets, torch.bfloat16)),
        ("gemm_1d2d_grouped_device_offsets", ops.gemm_1d2d_grouped_device_offsets,
         (qx, sx, qw, sw, 256, table, torch.float32)),
        ("gemm_1d1d_grouped", ops.gemm_1d1d_grouped, (qdt, sdt, qxt, sxt, 512, offsets, torch.float32)),
        ("gemm_1d1d_grouped_device_offsets", ops.gemm_1d1d_grouped_device_offsets,
         (qdt, sdt, qxt, sxt, 512, table, torch.float32)),
    ]
    for name, op, args in cases:
        if expect("opcheck " + name, lambda: torch.library.opcheck(op, args)):
            check(True, "")
    # the fake layouts are the binding's (blockfp8.canonical_layout) and the real outputs'
    for rows, cols in ((1, 1), (5, 17), (129, 300)):
        real = ops.quantize_1x128(torch.ones(rows, cols, device=dev), True, True, False, None)
        want = [ops.scale_shape(rows, cols, 1)[0], ops.scale_shape(rows, cols, 1)[1],
                ops.scale_shape(cols, rows, 1)[0], ops.scale_shape(cols, rows, 1)[1]]
        check([tuple(t.shape) for t in real] == [tuple(s) for s in want], "quantize_1x128 %dx%d shapes" % (rows, cols))
    # operands that do not hold what k and the granularity say: refused before the library reads them
    bad_calls = [
        ("codes cut short", ValueError, lambda: ops.gemm_1d2d(qa[:, :128], sa, qb, sb, 300, torch.bfloat16)),
        ("scales cut short", ValueError, lambda: ops.gemm_1d2d(qa, sa, qb, sb[:, :1], 300, torch.bfloat16)),
        ("int8 codes", TypeError, lambda: ops.gemm_1d1d(qdyt.view(torch.int8), sdyt, qat, sat, 200, torch.float32)),
        ("f16 output", ValueError, lambda: ops.gemm_1d2d(qa, sa, qb, sb, 300, torch.float16)),
        ("f64 input", TypeError, lambda: ops.quantize_1x128(x.double(), True, False, False, None)),
        ("int64 flag", ValueError, lambda: ops.quantize_128x128(w, False, False, flag.long())),
        ("int32 offsets", ValueError, lambda: ops.gemm_1d2d_grouped_device_offsets(
            qx, sx, qw, sw, 256, table.int(), torch.float32)),
    ]
    for what, kind, call in bad_calls:
        try:
            call()
            check(False, "ops with %s: no error" % what)
        except Exception as e:  # noqa: BLE001
            check(type(e) is kind and "blockfp8" in str(e), "ops with %s: %r" % (what, e))
    empty = ops.quantize_1x128(torch.ones(0, 128, device=dev), True, True, False, None)
    check(tuple(empty[0].shape) == (0, 128) and tuple(empty[2].shape) == (128, 0), "quantize_1x128 of 0 rows")
    check(tuple(ops.gemm_1d2d(empty[0], empty[1], qb[:, :128].contiguous(), sb[:, :1].contiguous(), 128,
                              torch.bfloat16).shape) == (0, 260), "gemm_1d2d of 0 rows")


def small_model(seed=0):
    torch.manual_seed(seed)
    return llama.Llama(SMALL).to(dev)


def not_head(module, fqn):
    return fqn != "head"


def test_convert():
    model = small_model()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    params_before = {name: p for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    bft.convert_to_float8_blockwise_training(model, module_filter_fn=not_head)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    converted = [m for m in linears if isinstance(m, bft.Float8BlockwiseLinear)]
    check(len(converted) == 4 * SMALL.n_layers and len(linears) == len(converted) + 1,
          "convert: %d of %d linear layers converted" % (len(converted), len(linears)))
    check(not isinstance(model.head, bft.Float8BlockwiseLinear), "convert: the filtered head was converted")
    params_after = dict(model.named_parameters())
    check(params_after.keys() == params_before.keys()
          and all(params_after[k] is params_before[k] for k in params_before),
          "convert: the parameters are not the nn.Linear's own objects")
    state = model.state_dict()
    check(state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in reference),
          "convert: the state dict differs from the unconverted model's")
    # a bf16 checkpoint of the unconverted model loads into the converted one, and back
    bf16_state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in reference.items()}
    model.load_state_dict(bf16_state)
    plain = small_model(seed=1)
    plain.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    check(all(torch.equal(a, b.float()) for a, b in zip(plain.state_dict().values(), bf16_state.values())),
          "convert: a bf16 checkpoint does not round-trip through the converted model")
    check(any(p is params_before["layers.0.attn.qkv.weight"] for g in optimizer.param_groups for p in g["params"]),
          "convert: the optimizer lost the parameters")
    again = bft.convert_to_float8_blockwise_training(model)
    check(again is model and isinstance(model.head, bft.Float8BlockwiseLinear)
          and model.layers[0].attn.qkv is converted[0], "convert: a second conversion replaced converted layers")
    single = bft.convert_to_float8_blockwise_training(torch.nn.Linear(256, 128).to(dev))
    check(isinstance(single, bft.Float8BlockwiseLinear) and single.bias is not None, "convert: a bare nn.Linear")
    experts = torch.nn.ModuleDict({"experts": bft.GroupedLinear(3, 256, 128).to(dev)})
    weight = experts["experts"].weight
    bft.convert_to_float8_blockwise_training(experts)
    check(isinstance(experts["experts"], bft.Float8BlockwiseGroupedLinear) and experts["experts"].weight is weight,
          "convert: GroupedLinear not swapped sharing its weight")
    for bad in (lambda: bft.convert_to_float8_blockwise_training(model, recipe="fp4"),
                lambda: bft.convert_to_float8_blockwise_training(model, module_filter_fn="head")):
        try:
            bad()
            check(False, "convert: a bad argument accepted")
        except (TypeError, ValueError):
            check(True, "")


def batch(seed, rows=2, seq=128):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, SMALL.vocab_size, (rows, seq + 1), generator=gen)
    return tokens[:, :-1].to(dev), tokens[:, 1:].to(dev)


def loss_of(model):
    def run(tokens, targets):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            return model(tokens, targets)
    return run


class GraphOps:
    """An AOT-autograd backend that records which blockfp8 operators each
    graph (forward, backward) calls, then runs it eagerly."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd
        from functorch.compile import min_cut_rematerialization_partition
        self.forward, self.backward = [], []
        # as inductor runs AOT autograd: input mutations (the non-finite flags) stay in the graph
        self.backend = aot_autograd(fw_compiler=self._record(self.forward), bw_compiler=self._record(self.backward),
                                    partition_fn=min_cut_rematerialization_partition,
                                    keep_inference_input_mutations=True)

    @staticmethod
    def _record(into):
        from functorch.compile import make_boxed_func

        def compiler(gm, example_inputs):
            names = []
            for node in gm.graph.nodes:
                text = str(node.target)
                if "blockfp8" in text:
                    names.append(text)
                elif "auto_functionalized" in text:  # a mutating operator, functionalized
                    names.append(str(node.args[0]))
            into.append(names)
            return make_boxed_func(gm.forward)
        return compiler


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def compare(label, loss_a, loss_b, grads_a, grads_b, tolerance):
    rel = abs(loss_a - loss_b) / abs(loss_a)
    worst = min(torch.nn.functional.cosine_similarity(grads_a[n].flatten().double(), grads_b[n].flatten().double(),
                                                      dim=0).item() for n in grads_a)
    check(rel <= tolerance and worst >= 1 - tolerance,
          "%s: loss %.6f vs eager %.6f, worst gradient cosine %.6f" % (label, loss_b, loss_a, worst))


def test_model_compile():
    model = small_model()
    bft.convert_to_float8_blockwise_training(model, module_filter_fn=not_head)
    run = loss_of(model)
    tokens, targets = batch(1)
    explained = torch._dynamo.explain(run)(tokens, targets)
    check(explained.graph_count == 1 and explained.graph_break_count == 0,
          "explain: %d graphs, %d graph breaks: %s" % (explained.graph_count, explained.graph_break_count,
                                                       [r.reason for r in explained.break_reasons]))
    print("torch._dynamo.explain(Llama with blockfp8 layers): %d graph, %d graph breaks, %d ops"
          % (explained.graph_count, explained.graph_break_count, explained.op_count))
    torch._dynamo.reset()
    eager_loss = run(tokens, targets)
    eager_loss.backward()
    eager = grads(model)
    model.zero_grad(set_to_none=True)
    recorder = GraphOps()
    compiled = torch.compile(run, fullgraph=True, backend=recorder.backend)
    loss = compiled(tokens, targets)
    loss.backward()
    compare("compiled (aot autograd)", eager_loss.item(), loss.item(), eager, grads(model), 1e-5)
    fwd = sum(recorder.forward, [])
    bwd = sum(recorder.backward, [])
    check(sum("quantize_1x128" in n for n in fwd) == 4 * SMALL.n_layers
          and sum("gemm_1d2d" in n for n in fwd) == 4 * SMALL.n_layers,
          "forward graph: blockfp8 operators %s" % sorted(set(fwd)))
    check(sum("gemm_1d1d" in n for n in bwd) == 4 * SMALL.n_layers
          and sum("gemm_1d2d" in n for n in bwd) >= 4 * SMALL.n_layers - 1,
          "backward graph: blockfp8 operators %s" % sorted(set(bwd)))
    flags = [m.nonfinite_flags for m in model.modules() if isinstance(m, bft.Float8BlockwiseLinear)]
    check(all(int(f.sum()) == 0 for f in flags), "compiled: non-finite flags raised on finite data")
    model.zero_grad(set_to_none=True)
    if ON_CUDA:  # inductor with CUDA graphs (the bench runs inductor's default mode)
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        torch._logging.set_logs(perf_hints=True)  # says why a graph skips CUDA graphs
        compiled = torch.compile(run, fullgraph=True, mode="reduce-overhead")
        for step in range(4):  # warm-up, record, replays
            model.zero_grad(set_to_none=True)
            loss = compiled(tokens, targets)
            loss.backward()
        torch.cuda.synchronize()
        compare("inductor mode=reduce-overhead", eager_loss.item(), loss.item(), eager, grads(model), 2e-2)
        skips = counters["inductor"]["cudagraph_skips"]
        print("reduce-overhead: %d graphs skipped CUDA graphs (the reasons: perf_hints in the log above)" % skips)
        check(not skips, "reduce-overhead: CUDA graphs skipped: %s" % skips)
    torch._dynamo.reset()
    # a NaN in the input of a compiled layer still raises its flag
    layer = model.layers[0].attn.qkv
    layer.reset_nonfinite()
    with torch.no_grad():
        model.tok_emb.weight[tokens[0, 0]] = float("nan")
    torch.compile(run, fullgraph=True, backend=GraphOps().backend)(tokens, targets).backward()
    check(layer.nonfinite()[:1] == ["input"], "compiled: NaN input flags %s" % layer.nonfinite())


def test_layer_inductor():
    """One Float8BlockwiseLinear through inductor (bias, 3-D input, dynamic token count) against eager."""
    gen = torch.Generator().manual_seed(5)
    layer = bft.Float8BlockwiseLinear(384, 256, bias=True).to(dev)
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for tokens in (96, 200):
        x = torch.randn(2, tokens, 384, generator=gen).to(dev, torch.bfloat16).requires_grad_(True)
        dy = torch.randn(2, tokens, 256, generator=gen).to(dev, torch.bfloat16)
        outs = []
        for fn in (layer, compiled):
            layer.zero_grad(set_to_none=True)
            x.grad = None
            y = fn(x)
            y.backward(dy)
            outs.append((y.detach(), x.grad, layer.weight.grad, layer.bias.grad))
        # the fp8 products are the same bits; inductor adds the bias in fp32 (one rounding, eager two)
        same = all(torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2) for a, b in zip(*outs))
        check(same and torch.equal(outs[0][1], outs[1][1]) and torch.equal(outs[0][2], outs[1][2]),
              "inductor layer, %d tokens: y, dx, dW, db differ from eager" % tokens)
    torch._dynamo.reset()


def test_grouped_compile():
    gen = torch.Generator().manual_seed(9)
    experts = bft.Float8BlockwiseGroupedLinear(3, 256, 128).to(dev)
    x = torch.randn(512, 256, generator=gen).to(dev, torch.bfloat16)
    dy = torch.randn(512, 128, generator=gen).to(dev, torch.bfloat16)
    listed = [0, 128, 128, 384]
    for offsets in (listed, torch.tensor(listed, dtype=torch.int64, device=dev)):
        kind = "a tensor" if isinstance(offsets, torch.Tensor) else "a list"
        outs = []
        for fn in (experts, torch.compile(experts, fullgraph=True, backend=GraphOps().backend)):
            experts.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_(True)
            y = fn(xi, offsets)
            y.backward(dy)
            outs.append((y.detach(), xi.grad, experts.weight.grad))
        check(all(torch.equal(a, b) for a, b in zip(*outs)), "grouped layer compiled, offsets as %s" % kind)
        check(bool((outs[0][0][384:] == 0).all()), "grouped layer: rows past the last expert")
        explained = torch._dynamo.explain(lambda a, o: experts(a, o))(x, offsets)
        check(explained.graph_break_count == 0, "grouped layer, offsets as %s: %d graph breaks"
              % (kind, explained.graph_break_count))
        torch._dynamo.reset()
    reference = bft.GroupedLinear(3, 256, 128).to(dev)
    with torch.no_grad():
        reference.weight.copy_(experts.weight)
    y_ref = reference(x.float(), listed).double()
    y = experts(x.float(), listed).double()
    db = 20 * torch.log10(y_ref.norm() / (y_ref - y).norm()).item()
    check(db >= 28, "Float8BlockwiseGroupedLinear vs GroupedLinear: %.1f dB" % db)


def main():
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for test in (test_opcheck, test_convert, test_model_compile, test_layer_inductor, test_grouped_compile):
        expect(test.__name__, test)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
