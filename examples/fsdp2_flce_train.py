"""FSDP2 + torch.compile training step with a fused-linear-cross-entropy (FLCE) head.

A small causal-LM-shaped model (embedding, a few residual MLP blocks, an LM head
whose loss is a fused linear cross entropy) is sharded with FSDP2
(``torch.distributed.fsdp.fully_shard``, bf16 params via ``MixedPrecisionPolicy``),
compiled with ``torch.compile`` and trained for a few steps.

This script never imports ``inductor_addmm_fix``. The fix is active only because the
package is installed (its entry point / ``.pth`` fire when torch is imported), or via
the ``sitecustomize.py`` recipe of docs/activation.md. Each rank reports whether the
fix is active (it reads ``sys.modules``, which is not an import) and whether the
out_dtype addmm went through the plugin's Inductor lowering
(``torch._dynamo.utils.counters["inductor_addmm_fix"]["addmm.dtype:*"]``).

GPU (2 GPUs, Liger-Kernel installed; NVLink multicast off):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        torchrun --nproc_per_node=2 examples/fsdp2_flce_train.py --device cuda --steps 5 --check

CPU (gloo; a plain-torch stand-in for Liger's FLCE, which needs CUDA/Triton):

    torchrun --nproc_per_node=2 examples/fsdp2_flce_train.py --device cpu --steps 3 --check

``--check``: after training, rank 0 runs the same model and data in a single process
in eager mode (no FSDP, no compile, same bf16 parameter casts) and compares the
losses step by step; it prints PASS or FAIL and the exit code is 0 only on PASS (and
only if every rank reported the fix active and the addmm lowered).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, LAYERS, SEQ, MICRO_BATCH = 256, 64, 3, 32, 4
CHUNK = 32  # rows of the flattened (batch*seq, hidden) input per FLCE chunk
RTOL = 2e-2  # bf16 compute: relative loss tolerance step by step
COUNTER = "inductor_addmm_fix"


# --------------------------------------------------------------------------- head


class ChunkedFLCE(torch.autograd.Function):
    """Plain-torch stand-in for Liger's fused linear cross entropy.

    Like Liger, the forward computes the loss and both gradients chunk by chunk (the
    (N, vocab) logits never exist at once) and accumulates the weight gradient in fp32
    with ``torch.addmm(grad_weight, g.t(), x, out_dtype=torch.float32, out=grad_weight)``;
    the backward only scales the stored gradients.
    """

    @staticmethod
    def forward(ctx, x, weight, target):
        n = x.shape[0]
        grad_x = torch.empty_like(x)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        for start in range(0, n, CHUNK):
            x_chunk = x[start : start + CHUNK]
            logits = (x_chunk @ weight.t()).float()
            t = target[start : start + CHUNK]
            loss = loss + F.cross_entropy(logits, t, reduction="sum")
            g = torch.softmax(logits, dim=-1)
            g[torch.arange(t.shape[0], device=t.device), t] -= 1.0
            g = (g / n).to(x.dtype)  # d(mean loss)/d(logits)
            grad_x[start : start + CHUNK] = g @ weight
            if torch.compiler.is_compiling():
                torch.addmm(grad_weight, g.t(), x_chunk, out_dtype=torch.float32, out=grad_weight)
            else:  # eager CPU has no kernel for the out_dtype overloads
                grad_weight.addmm_(g.t().float(), x_chunk.float())
        ctx.save_for_backward(grad_x, grad_weight.to(weight.dtype))
        return loss / n

    @staticmethod
    def backward(ctx, grad_output):
        grad_x, grad_weight = ctx.saved_tensors
        return grad_x * grad_output, grad_weight * grad_output, None


def flce_loss(x, weight, target, device_type):
    if device_type == "cuda":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return liger_fused_linear_cross_entropy(x, weight, target, accum_dtype=torch.float32)
    return ChunkedFLCE.apply(x, weight, target)


# --------------------------------------------------------------------------- model


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, h):
        return h + self.down(F.gelu(self.up(h)))


class TinyCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, labels):
        h = self.embed(input_ids)
        for block in self.blocks:
            h = block(h)
        # causal-LM shift: position i predicts token i+1
        x = h[:, :-1].reshape(-1, HIDDEN)
        return flce_loss(x, self.lm_head.weight, labels[:, 1:].reshape(-1), input_ids.device.type)


def make_batches(steps, world, device):
    """Global batches (world * MICRO_BATCH sequences); identical on every rank."""
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(VOCAB, (world * MICRO_BATCH, SEQ), generator=gen).to(device) for _ in range(steps)]


def make_model():
    torch.manual_seed(0)
    return TinyCausalLM()


# --------------------------------------------------------------------------- runs


def fix_report():
    """Whether the fix is active in this process, without importing it."""
    module = sys.modules.get("inductor_addmm_fix")
    report = {"imported": module is not None, "installed": False, "activation": None}
    if module is not None and hasattr(module, "status"):
        state = module.status()
        report.update(installed=bool(state.installed), activation=state.activation)
    from torch._dynamo.utils import counters

    report["addmm_lowerings"] = {k: v for k, v in counters[COUNTER].items() if k.startswith("addmm.dtype:")}
    report["addmm_lowered"] = sum(report["addmm_lowerings"].values()) > 0
    return report


def train_fsdp(args, rank, world, device):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = make_model().to(device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    compiled = torch.compile(model)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for batch in make_batches(args.steps, world, device):
        local = batch[rank * MICRO_BATCH : (rank + 1) * MICRO_BATCH]
        loss = compiled(local, local)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        global_loss = loss.detach().float().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        losses.append(global_loss.item())
    return losses


def train_eager_reference(args, world, device):
    """Single process, no FSDP, no compile: the same model, data and bf16 casts.

    FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) computes with
    bf16 copies of fp32 parameters and reduces fp32 gradients (averaged over ranks);
    here the bf16 copies are made inside autograd, and the loss is the mean over the
    whole global batch, which equals the average of the ranks' mean losses."""
    model = make_model().to(device)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for batch in make_batches(args.steps, world, device):
        per_rank = []
        for r in range(world):  # one micro-batch per rank, gradients averaged
            local = batch[r * MICRO_BATCH : (r + 1) * MICRO_BATCH]
            params = {k: v.to(torch.bfloat16) for k, v in model.named_parameters()}
            loss = torch.func.functional_call(model, params, (local, local))
            (loss / world).backward()
            per_rank.append(loss.detach().float().item())
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(sum(per_rank) / world)
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--check", action="store_true", help="compare with a single-process eager run; PASS/FAIL")
    args = parser.parse_args(argv)

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend=backend, device_id=device if args.device == "cuda" else None)

    ok = True
    error = None
    try:
        losses = train_fsdp(args, rank, world, device)
    except Exception as exc:  # report it as a rank result, then fail
        losses, error, ok = [], f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", False

    report = fix_report()
    report.update(rank=rank, world=world, device=str(device), error=error)
    reports = [None] * world
    dist.all_gather_object(reports, report)
    dist.barrier()

    if rank == 0:
        # Each rank's own report, printed by rank 0 so that lines never interleave.
        for r in reports:
            print(f"[rank {r['rank']}] fix " + json.dumps(r, sort_keys=True), flush=True)
        everywhere = all(r["installed"] and r["addmm_lowered"] and r["error"] is None for r in reports)
        print(f"fix active and addmm.dtype lowered on all {world} ranks: {'yes' if everywhere else 'NO'}", flush=True)
        ok = ok and everywhere
        for step, loss in enumerate(losses):
            print(f"step {step}: loss {loss:.6f}", flush=True)
        if args.check:
            if error is None:
                reference = train_eager_reference(args, world, device)
                for step, (got, want) in enumerate(zip(losses, reference)):
                    rel = abs(got - want) / max(abs(want), 1e-6)
                    good = rel <= RTOL
                    ok = ok and good
                    print(f"check step {step}: compiled {got:.6f} eager {want:.6f} rel {rel:.2e} "
                          f"{'ok' if good else 'MISMATCH'}", flush=True)
            print("PASS" if ok else "FAIL", flush=True)
    status = torch.tensor([0 if ok else 1], device=device)
    dist.broadcast(status, src=0)
    dist.barrier()  # every rank past the broadcast before any rank tears the group down
    dist.destroy_process_group()
    return int(status.item())


if __name__ == "__main__":
    sys.exit(main())
