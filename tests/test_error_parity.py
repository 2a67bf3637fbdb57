"""Invalid input (mismatched operand dtypes, an out_dtype eager rejects, shapes that
do not multiply, a wrong out= buffer, a wrong bias) makes compiled code raise an
error that names the problem, at trace time, for every backend: nothing is computed
in a wrong dtype.  The CUDA comparison with eager's own errors is
tests/gpu/test_error_parity_cuda.py.  The error is raised as it is, with nothing
logged on the way (FakeTensor logs a traceback for every exception of a meta kernel)."""

import logging
import os
import traceback

import pytest
import torch

import inductor_addmm_fix

from invalid_cases import INVALID


# An out= of the wrong shape: torch's out_wrapper resizes it while tracing, with a
# warning, before Dynamo refuses the call.
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized:UserWarning")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_input_raises_an_error_naming_the_problem(case, backend, dynamic, torch_log):
    fn, args = case.build("cpu")
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)
    with pytest.raises(RuntimeError, match=case.message) as error:
        compiled(*args)
    # rejected while tracing, not by the CPU's missing eager kernel
    assert not isinstance(error.value, NotImplementedError) and "Could not run" not in str(error.value)
    # No "failed while attempting to run meta for aten.addmm.dtype" with a traceback
    # through the package's meta kernel: the package checks before FakeTensor runs it.
    # (Where the stock meta kernel is kept, FakeTensor logs its error as without the package.)
    assert [r.getMessage() for r in torch_log if _through_the_package(r)] == []
    if _meta_kernel_patched(case.op.name):
        assert [r.getMessage() for r in torch_log if r.levelno >= logging.WARNING] == []


def _through_the_package(record: logging.LogRecord) -> bool:
    package = os.path.dirname(inductor_addmm_fix.__file__)
    tb = record.exc_info[2] if record.exc_info else None
    files = [frame.filename for frame in traceback.extract_tb(tb)] if tb else []
    return any(f.startswith(package) for f in files) or "inductor_addmm_fix" in record.getMessage()


def _meta_kernel_patched(op: str) -> bool:
    return any(p.name == f"core.meta.{op}.dtype" and p.applied for p in inductor_addmm_fix.status().patches)


@pytest.fixture
def torch_log():
    """The records of torch's loggers, which torch's own handlers write to stderr (each
    registered one, ``torch._subclasses.fake_tensor`` among them, has its handler and
    does not propagate)."""
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    names = ["torch", "torch._subclasses.fake_tensor"]
    names += [n for n, logger in logging.root.manager.loggerDict.items()
              if n.startswith("torch.") and isinstance(logger, logging.Logger) and not logger.propagate]
    loggers = [logging.getLogger(n) for n in dict.fromkeys(names)]
    for logger in loggers:
        logger.addHandler(handler)
    yield records
    for logger in loggers:
        logger.removeHandler(handler)
