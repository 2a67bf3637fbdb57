"""Liger as users meet it: a Hugging Face causal LM patched by Liger's own
``apply_liger_kernel_to_<model>``, compiled, trained a few steps on batches whose length
changes every step.

For Llama, Qwen 2 (its 151936-token vocabulary, a small hidden size: one chunk per token)
and Gemma 2 (its final logit softcap reaches Liger's kernel), with ``torch.compile`` of
the model and of the whole step (AdamW included), every step is compared with the same
step in eager: the loss and the gradients must be as close to eager's as eager is to the
plain model (Hugging Face's own layers and ``F.cross_entropy`` of the full logits),
torch must log no traceback, and the graphs compiled are counted after every step.  One
run goes through ``Trainer(use_liger_kernel=True, torch_compile=True)``.

``HF_RESULTS=path`` appends one JSON line per case (every step's figures), written
before anything is asserted.  The model configs and batches: ``hf_training.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from importlib import metadata

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (Liger's Triton kernels)")
transformers = pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("liger_kernel.transformers", reason="needs liger-kernel")

from gpu import hf_training  # noqa: E402  (tests/ is on sys.path: conftest.py)

LOSS_FLOOR = 1e-5  # relative: what fp32 sums in another order may differ by
GRAD_FLOOR = 1e-4  # relative (norms): the same, after AdamW steps on either side


def liger_version() -> str:
    for dist in ("liger-kernel", "liger-kernel-nightly"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def record(row: dict) -> None:
    row = {"liger": liger_version(), "transformers": transformers.__version__, "torch": torch.__version__, **row}
    print(json.dumps(row))
    if os.environ.get("HF_RESULTS"):
        with open(os.environ["HF_RESULTS"], "a") as f:
            f.write(json.dumps(row) + "\n")


def within_eagers_error(steps) -> list[str]:
    """The steps whose compiled loss or gradients are further from eager than the plain
    model's are (twice that, or the fp32 floor)."""
    bad = []
    for s in steps:
        loss_bound = 2 * abs(s.loss_plain - s.loss_eager) + LOSS_FLOOR * max(1.0, abs(s.loss_eager))
        if not math.isfinite(s.loss_compiled) or abs(s.loss_compiled - s.loss_eager) > loss_bound:
            bad.append(f"step {s.step}: loss {s.loss_compiled} vs eager {s.loss_eager} (bound {loss_bound:.2e})")
        if s.grad_error > 2 * s.eager_grad_error + GRAD_FLOOR:
            bad.append(f"step {s.step}: gradients {s.grad_error:.2e} from eager's, plain model {s.eager_grad_error:.2e}")
    return bad


@pytest.mark.parametrize("mode", ["model", "step"])
@pytest.mark.parametrize("name", list(hf_training.MODELS))
def test_compiled_training_matches_eager_with_no_traceback(name, mode):
    steps, warned = hf_training.run(name, mode, device="cuda", liger=True)
    graphs = [s.graphs for s in steps]
    record({
        "case": f"{name}-{mode}", "steps": [dataclasses.asdict(s) for s in steps], "graphs_per_step": graphs,
        "torch_warnings": len(warned.records), "torch_tracebacks": len(warned.tracebacks()),
        "first_warnings": [r.getMessage()[:300] for r in warned.records[:3]],
    })  # fmt: skip
    assert not within_eagers_error(steps), within_eagers_error(steps)
    assert not warned.tracebacks(), warned.tracebacks()[:1]
    # The first length, then one recompile with symbolic sizes; after that none, or under
    # liger_head's loop setting Liger's chunk loop once per number of chunks not run
    # before (hf_training.graphs_expected).
    want = hf_training.graphs_expected(name, graphs[1])
    assert graphs[2:] == want, f"graphs after each step {graphs}, expected {graphs[:2] + want}"


def trainer_losses(name: str, compile: bool, tmp_path) -> tuple[list[float], hf_training.TorchWarnings]:
    """The losses ``Trainer`` logs over three steps of the model's batches, with Liger."""

    class Batches(torch.utils.data.Dataset):
        def __init__(self):
            self.items = hf_training.batches(name, "cpu")

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("compiled" if compile else "eager")), max_steps=3, per_device_train_batch_size=1,
        learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_liger_kernel=True,
        torch_compile=compile, dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    model = hf_training.new_model(name, "cpu")
    first = lambda items: items[0]  # noqa: E731  (each item is a whole batch already)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Batches(), data_collator=first)
    with hf_training.TorchWarnings() as warned:
        trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], warned


def test_trainer_with_liger_and_torch_compile_logs_eager_s_losses(tmp_path):
    want, _ = trainer_losses("llama", False, tmp_path)
    got, warned = trainer_losses("llama", True, tmp_path)
    record({"case": "llama-trainer", "losses_eager": want, "losses_compiled": got, "torch_tracebacks": len(warned.tracebacks())})
    assert len(got) == len(want) == 3
    assert got == pytest.approx(want, rel=1e-4), (got, want)  # fp32 sums in another order, three AdamW steps
    assert not warned.tracebacks(), warned.tracebacks()[:1]
