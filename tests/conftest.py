"""Each test compiles from a fresh Dynamo with every feature installed, in a private
Inductor cache, with torch seeded: by default from the test's name (the same inputs on
every run); ``INDUCTOR_ADDMM_FIX_TEST_SEED=<int>`` or ``=random`` draws others.  A failing
test prints its seed."""

import atexit
import os
import random
import shutil
import sys
import tempfile
import zlib

# A private Inductor cache for the session: /tmp/torchinductor_<user> is shared by
# every process on the machine, and an artifact compiled elsewhere (with a patched
# torch and no cache tag) once made the stock failure vanish after uninstall().
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cache-tests-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

import inductor_addmm_fix  # noqa: E402  (the import applies the fix)


@pytest.fixture(autouse=True)
def fresh_dynamo(request):
    """Each test compiles from scratch, with every feature installed, or those its
    ``@pytest.mark.features(spec)`` selects (a spec as ``install(features=...)`` takes)."""
    marker = request.node.get_closest_marker("features")
    inductor_addmm_fix.install(marker.args[0] if marker else None)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    if marker:
        inductor_addmm_fix.install()


@pytest.fixture(autouse=True)
def seeded_random(request):
    """Seed torch for every test; the seed is printed when a test fails."""
    choice = os.environ.get("INDUCTOR_ADDMM_FIX_TEST_SEED")
    if choice == "random":
        seed = random.randrange(2**31)
    elif choice:
        seed = int(choice)
    else:
        seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed


def pytest_runtest_makereport(item, call):
    if call.excinfo is not None:
        for name, value in item.user_properties:
            if name == "seed":
                item.add_report_section(call.when, "seed", f"torch.manual_seed({value})")
