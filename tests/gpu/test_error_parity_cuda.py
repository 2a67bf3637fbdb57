"""On CUDA, compiled code and eager agree on invalid input: where eager raises,
compiled code raises an exception of the same type (or a subclass: Dynamo wraps
errors in RuntimeError subclasses) whose message names the same problem; where
eager accepts (an out= of another shape is resized), compiled code gives the same
result; where eager silently ignores out_dtype (a result in another dtype), compiled
code raises an error naming the problem.  Every pair of messages is printed
(``pytest -s``) for a human to compare.

Skips without CUDA.  Uses the invalid inputs of tests/invalid_cases.py."""

import re
import warnings

import pytest
import torch

from invalid_cases import INVALID

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _outcome(fn, args):
    """(exception or None, result or None) of fn(*args), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return None, fn(*args)
        except Exception as error:  # noqa: BLE001 - compared below
            return error, None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_compiled_code_fails_like_eager(case):
    torch.manual_seed(0)
    fn, args = case.build("cuda")
    eager_args = tuple(a.clone() for a in args)
    eager_error, eager_result = _outcome(fn, eager_args)
    compiled_error, compiled_result = _outcome(torch.compile(fn, backend="inductor"), args)
    print(f"\n[{case.id}]\n  eager:    {eager_error!r:.300}\n  compiled: {compiled_error!r:.300}")

    if eager_error is None and eager_result.dtype != case.out_dtype:
        # Eager silently ignored out_dtype (torch 2.11's bmm/baddbmm .dtype_out on CUDA
        # compute in the dtype of out= without checking it): compiled code refuses instead.
        assert compiled_error is not None, f"compiled code computed a {compiled_result.dtype} result too"
        assert re.search(case.message, str(compiled_error)), _first_line(compiled_error)
        return

    if eager_error is None:
        # eager accepts it: the compiled result must be the same
        assert compiled_error is None, f"eager accepts this, compiled raised {compiled_error!r}"
        assert compiled_result.dtype == eager_result.dtype
        assert compiled_result.shape == eager_result.shape
        torch.testing.assert_close(compiled_result, eager_result, rtol=2e-2, atol=2e-2)
        return

    assert compiled_error is not None, (
        f"eager raises {eager_error!r} but compiled code computed a {compiled_result.dtype} result"
    )
    assert isinstance(compiled_error, type(eager_error)), (
        f"eager raises {type(eager_error).__name__}, compiled {type(compiled_error).__mro__}"
    )
    if str(compiled_error) == str(eager_error):
        return  # eager's own error: Dynamo ran the op eagerly (e.g. after a graph break on out=)
    # Both name the problem.  Eager's words are C++'s, ours Python's: each message
    # must match the case's pattern, except where eager's own wording does not.
    assert re.search(case.message, str(compiled_error)), _first_line(compiled_error)
    if not re.search(case.message, str(eager_error)):
        pytest.xfail(f"eager's message does not match {case.message!r}: {_first_line(eager_error)}")
