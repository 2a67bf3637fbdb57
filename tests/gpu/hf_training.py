"""Training steps of tiny Hugging Face causal LMs, eager and compiled, side by side.

What ``test_hf_liger_models.py`` runs and ``benchmarks/compile_time.py`` times: a model
from a config (random weights, nothing downloaded), patched by Liger's own
``apply_liger_kernel_to_<model>(model=...)``, trained with AdamW on batches whose length
changes every step (the second row padded, its padding labelled -100).

Three copies of one initial model take the same batches:

* ``eager``: Liger's model, eager;
* ``compiled``: Liger's model, with ``torch.compile`` of the model or of the whole step;
* ``plain``: the model as Hugging Face wrote it, eager, its loss ``F.cross_entropy`` of the
  full logits: another correct implementation, whose distance from ``eager`` is eager's
  error, the yardstick for ``compiled``.

Without CUDA (Liger's kernels are Triton kernels) the three run on the CPU with Liger
left out, which checks the harness, not Liger.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Callable

import torch
import torch.nn.functional as F

#: name -> (config class, config kwargs, Liger's patch function, per-step batch shape)
MODELS: dict[str, dict[str, Any]] = {
    # 16 rows of vocabulary per hidden unit: Liger's FLCE runs 10-16 chunks of 16 rows
    "llama": dict(
        config="LlamaConfig", patch="apply_liger_kernel_to_llama", batch=2, lengths=(96, 128, 80, 112),
        kwargs=dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=4096, attn_implementation="sdpa"),
    ),
    # Qwen's vocabulary with a small hidden size: one row per chunk, one chunk per token
    "qwen2": dict(
        config="Qwen2Config", patch="apply_liger_kernel_to_qwen2", batch=1, lengths=(12, 16, 10, 14),
        kwargs=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=151936, attn_implementation="sdpa"),
    ),
    # Gemma 2: final logit softcap (Liger passes it to its kernel), eager attention (attention softcap)
    "gemma2": dict(
        config="Gemma2Config", patch="apply_liger_kernel_to_gemma2", batch=2, lengths=(96, 128, 80, 112),
        kwargs=dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=64, vocab_size=4096, final_logit_softcapping=30.0,
                    attn_implementation="eager"),
    ),
}  # fmt: skip


def config(name: str):
    import transformers

    spec = MODELS[name]
    return getattr(transformers, spec["config"])(**spec["kwargs"])


def new_model(name: str, device: str, seed: int = 0) -> torch.nn.Module:
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config(name))
    return model.to(device).train()


def apply_liger(name: str, model: torch.nn.Module) -> None:
    """Liger's own patch of this model instance (its FLCE head, RMSNorm, SwiGLU, RoPE)."""
    import liger_kernel.transformers as liger

    getattr(liger, MODELS[name]["patch"])(model=model)


def batches(name: str, device: str, seed: int = 0, lengths: tuple[int, ...] | None = None) -> list[dict]:
    """One batch per step, of the model's lengths: random tokens; in a batch of two the
    second row is padded over its last quarter (attention mask 0, labels -100)."""
    spec = MODELS[name]
    vocab = spec["kwargs"]["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    out = []
    for length in lengths or spec["lengths"]:
        ids = torch.randint(vocab, (spec["batch"], length), generator=generator)
        mask = torch.ones_like(ids)
        if spec["batch"] > 1:
            mask[1, length - length // 4 :] = 0
        labels = ids.masked_fill(mask == 0, -100)
        out.append({k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=mask, labels=labels).items()})
    return out


def liger_chunks(name: str, lengths: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """Per step, (rows per chunk, chunks) of Liger's FLCE loop: its ``batch * length`` rows
    in chunks of ``next_power_of_2(cdiv(rows, cdiv(V, H)))`` (Liger 0.8.5's forward)."""
    spec = MODELS[name]
    h, v = spec["kwargs"]["hidden_size"], spec["kwargs"]["vocab_size"]
    out = []
    for length in lengths or spec["lengths"]:
        rows = spec["batch"] * length
        chunk = min(1 << (-(-rows // -(-v // h)) - 1).bit_length(), rows)
        out.append((chunk, -(-rows // chunk)))
    return out


def graphs_expected(name: str, after_second_step: int, lengths: tuple[int, ...] | None = None) -> list[int]:
    """The graphs compiled after each step from the third on: the second step's graphs
    have symbolic sizes and serve every later length.  Under ``liger_head``'s ``auto``
    and ``opaque`` they run Liger's forward as one op, so that no graph follows.  Under
    ``loop`` Dynamo unrolls Liger's ``for chunk_id in range(num_chunks)`` and so compiles
    that loop's frame once more for each number of chunks it has not run (stock torch the
    same: docs/upstream/dynamo-loop-over-a-symbolic-count.md), and for each chunk size,
    which ``power_of_2_sizes`` makes a constant of its power-of-two range."""
    from inductor_addmm_fix.dynamo import liger_head

    chunks = liger_chunks(name, lengths)
    if liger_head.mode() != "loop":
        return [after_second_step] * (len(chunks) - 2)
    seen, graphs, out = {chunks[1]}, after_second_step, []
    for key in chunks[2:]:
        graphs += key not in seen
        seen.add(key)
        out.append(graphs)
    return out


def plain_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The causal LM loss from the full logits with ``F.cross_entropy`` (Gemma 2's final
    softcap applied), as Hugging Face computes it without Liger."""
    hidden = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    logits = model.lm_head(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    labels = batch["labels"][:, 1:]
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def model_loss(model: Callable[..., Any], batch: dict) -> torch.Tensor:
    return model(**batch).loss


def make_step(loss_fn: Callable[[Any, dict], torch.Tensor], model: Any, optimizer: torch.optim.Optimizer):
    """One training step; the gradients stay on the parameters until the next step."""

    def step(batch: dict) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def grad_error(got: torch.nn.Module, want: torch.nn.Module) -> float:
    """The largest relative error ``|g - g_want| / |g_want|`` (norms) over the parameters."""
    worst = 0.0
    for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
        if q.grad is None or p.grad is None:
            if (p.grad is None) != (q.grad is None):
                raise AssertionError(f"{name}: a gradient on one side only")
            continue
        norm = q.grad.double().norm().item()
        worst = max(worst, (p.grad.double() - q.grad.double()).norm().item() / max(norm, 1e-30))
    return worst


class TorchWarnings(logging.Handler):
    """The warnings torch's loggers emit while installed; those with a traceback apart."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> "TorchWarnings":
        logging.getLogger("torch").addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        logging.getLogger("torch").removeHandler(self)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info]


@dataclasses.dataclass
class StepResult:
    step: int
    length: int
    loss_eager: float
    loss_compiled: float
    loss_plain: float
    grad_error: float  # compiled vs eager
    eager_grad_error: float  # plain vs eager: eager's own error
    graphs: int  # unique graphs compiled so far


def run(name: str, mode: str, *, device: str, liger: bool, steps: int | None = None) -> tuple[list[StepResult], TorchWarnings]:
    """Train the three copies (eager, compiled, plain) over the model's batches.
    ``mode``: ``"model"`` compiles the model, ``"step"`` the whole step."""
    from torch._dynamo.utils import counters

    base = new_model(name, device)
    eager, compiled, plain = base, copy.deepcopy(base), copy.deepcopy(base)
    if liger:
        apply_liger(name, eager)
        apply_liger(name, compiled)
    eager_step = make_step(model_loss, eager, optimizer(eager))
    plain_step = make_step(plain_loss, plain, optimizer(plain))
    if mode == "model":
        compiled_step = make_step(model_loss, torch.compile(compiled), optimizer(compiled))
    elif mode == "step":
        compiled_step = torch.compile(make_step(model_loss, compiled, optimizer(compiled)))
    else:
        raise ValueError(mode)
    torch._dynamo.reset()
    counters.clear()
    results = []
    with TorchWarnings() as warned:
        for i, batch in enumerate(batches(name, device)[:steps]):
            want, got, ref = eager_step(batch), compiled_step(batch), plain_step(batch)
            results.append(
                StepResult(
                    step=i, length=batch["input_ids"].shape[1], loss_eager=want.item(), loss_compiled=got.item(),
                    loss_plain=ref.item(), grad_error=grad_error(compiled, eager), eager_grad_error=grad_error(plain, eager),
                    graphs=counters["stats"]["unique_graphs"],
                )
            )  # fmt: skip
    return results, warned
