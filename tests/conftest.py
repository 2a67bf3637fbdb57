import os
import random
import sys
import tempfile

import pytest

# A compile cache of this session's own: artifacts that other processes compiled
# (with or without the fix) must not answer for the code under test.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-addmm-fix-tests-"))

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

import inductor_addmm_fix  # noqa: E402  (the import applies the fix)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch, with the fix installed, and fresh counters."""
    inductor_addmm_fix.install()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def fresh_random(request):
    """Fresh random inputs for every test; the seed is printed when a test fails."""
    seed = random.randrange(2**31)
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed


def pytest_runtest_makereport(item, call):
    if call.excinfo is not None:
        for name, value in item.user_properties:
            if name == "seed":
                item.add_report_section(call.when, "seed", f"torch.manual_seed({value})")
