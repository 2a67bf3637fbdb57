"""Invalid input (mismatched operand dtypes, an out_dtype eager rejects, shapes that
do not multiply, a wrong out= buffer, a wrong bias) makes compiled code raise an
error that names the problem, at trace time, for every backend: nothing is computed
in a wrong dtype.  The CUDA comparison with eager's own errors is
tests/gpu/test_error_parity_cuda.py."""

import pytest
import torch

from invalid_cases import INVALID


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_input_raises_an_error_naming_the_problem(case, backend, dynamic):
    fn, args = case.build("cpu")
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)
    with pytest.raises(RuntimeError, match=case.message) as error:
        compiled(*args)
    # rejected while tracing, not by the CPU's missing eager kernel
    assert not isinstance(error.value, NotImplementedError) and "Could not run" not in str(error.value)
