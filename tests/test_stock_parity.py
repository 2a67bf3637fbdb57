"""A program that does not use the package's ops compiles as it does on stock torch:
PyTorch's own samples (the OpInfo database of ``torch.testing``) of the ops that the
package's lowerings, decompositions and passes look at, compiled with and without the
package, static and dynamic, gradients included, give the same bits
(``scripts/opinfo_parity.py``; its run over every op: docs/stock-parity.md).  The slow
run takes a fixed, seeded sample of those cases; ``pytest -m full_sweep`` takes them all."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
import torch

import inductor_addmm_fix
from processes import run_group

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "opinfo_parity.py"


def parity():
    spec = importlib.util.spec_from_file_location("opinfo_parity", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "a, b",
    [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 2**-20])),  # one bit of one element
        (torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, float("nan")])),  # NaNs elsewhere
        (torch.tensor([0.0]), torch.tensor([-0.0])),  # the sign of a zero
        (torch.zeros(2, 3), torch.zeros(3, 2).t()),  # the same values, other strides
        (torch.zeros(2, dtype=torch.float64), torch.zeros(2)),  # another dtype
        (torch.tensor([1 + 1j]), torch.tensor([1 - 1j])),  # the imaginary part
    ],
    ids=["one-bit", "nan-elsewhere", "signed-zero", "strides", "dtype", "imaginary"],
)
def test_the_comparison_tells_results_apart(a, b):
    assert not parity().same_bits([a], [b])


def test_the_comparison_takes_equal_results_and_nans_in_the_same_places():
    a = torch.tensor([float("nan"), -0.0, 3.0], dtype=torch.bfloat16)
    assert parity().same_bits([a], [a.clone()])


def sweep(tmp_path, *options: str) -> str:
    """Run the script on the ops the package looks at, every sample, gradients too; its
    output.  The script and its workers are one process group, killed if the test is
    interrupted or times out."""
    # the script imports the package these tests import, installed or not
    imported_from = str(Path(inductor_addmm_fix.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (imported_from, os.environ.get("PYTHONPATH")) if p)
    result = run_group(
        [sys.executable, str(SCRIPT), "--ops", "looked-at", "--samples", "0", "--grad", "--jobs", "2",
         "--out", str(tmp_path), *options],
        timeout=3600, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def cases(output: str) -> int:
    return int(re.search(r"^(\d+) cases: ", output, re.M).group(1))


@pytest.mark.slow
def test_a_seeded_sample_of_pytorch_s_samples_of_the_ops_the_package_looks_at_compiles_as_on_stock_torch(tmp_path):
    """Three cases (sample and mode) of each op, the same on every run: a few minutes."""
    output = sweep(tmp_path, "--pick", "3", "--seed", "0")
    assert cases(output) >= 3 * 15, output  # a few of every op, not a filter that matched nothing


@pytest.mark.slow
@pytest.mark.full_sweep
def test_every_one_of_pytorch_s_samples_of_the_ops_the_package_looks_at_compiles_as_on_stock_torch(tmp_path):
    """Every sample, static and dynamic (pytest -m full_sweep): about 14 minutes on two cores under a load of 3."""
    assert cases(sweep(tmp_path)) >= 200, "every sample of each op, not a filter that matched nothing"
