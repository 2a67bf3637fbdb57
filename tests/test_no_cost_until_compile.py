"""A process that imports torch and never compiles does not pay for Dynamo or Inductor:
activation, on every route, imports neither ``torch._dynamo`` nor ``torch._inductor``.
The features still apply before a compile uses the ops: the first compile after it
gets the fix, and so does the first eager call on meta tensors.  Fresh interpreters of this Python, where the package is installed (its
entry point and ``.pth`` line); the ``import`` and ``install()`` routes alone run with
``python -S`` and the site-packages folders on ``sys.path`` by hand (no ``.pth`` line)
and torch's autoload off (no entry point)."""

from __future__ import annotations

import json
import site
import textwrap

import pytest

from helpers import fresh

ACTIVATE_THEN_COMPILE = """
    import json, sys
    sys.path += {folders!r}
    {activate}
    heavy = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
    import inductor_addmm_fix as fix
    before = fix.status()

    def f(c, a, b):
        return torch.addmm(c, a, b, out_dtype=torch.float32)

    a, b, c = torch.randn(32, 64).bfloat16(), torch.randn(64, 16).bfloat16(), torch.randn(32, 16)
    out = torch.compile(f, backend="inductor", fullgraph=True)(c, a, b)
    ref = c.double() + a.double() @ b.double()
    print(json.dumps(dict(heavy=heavy, activation=before.activation, before=before.summary,
                          after=fix.status().summary, dtype=str(out.dtype),
                          error=((out.double() - ref).norm() / ref.norm()).item())))
"""

#: route -> (the interpreter's options, the code that activates, the environment)
ROUTES = {
    "entry-point": ((), "import torch", {}),
    ".pth": ((), "import torch", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "import": (("-S",), "import inductor_addmm_fix, torch", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "install()": (("-S",), "import inductor_addmm_fix; inductor_addmm_fix.install(); import torch",
                  {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
}


def activate_then_compile(route: str) -> dict:
    options, activate, env = ROUTES[route]
    folders = site.getsitepackages() if "-S" in options else []
    code = textwrap.dedent(ACTIVATE_THEN_COMPILE).format(folders=folders, activate=activate)
    result = fresh(*options, "-c", code, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _installed(route: str) -> bool:
    """Whether this Python has the route installed (a checkout on PYTHONPATH has neither
    the ``.pth`` line nor the entry point)."""
    from inductor_addmm_fix.activation import routes

    if route == ".pth":
        return routes.pth_file() is not None
    if route == "entry-point":
        return routes.entry_point_registered()
    return True


#: The default run takes the route an installed package takes; the slow run every route.
ROUTE_PARAMS = [route if route == "entry-point" else pytest.param(route, marks=pytest.mark.slow) for route in ROUTES]


@pytest.mark.parametrize("route", ROUTE_PARAMS)
def test_activation_imports_neither_dynamo_nor_inductor_and_the_first_compile_gets_the_fix(route):
    if not _installed(route):
        pytest.skip(f"the {route} route is not installed in this Python (the package is on its path only)")
    report = activate_then_compile(route)
    assert report["activation"] == route
    assert report["heavy"] == []
    assert report["before"] == f"fix applies at first compile (activated by {route})"
    assert report["after"] == f"fix active (activated by {route})"
    assert report["dtype"] == "torch.float32" and report["error"] < 1e-5


EAGER_META_FIRST = """
    import json, sys
    import torch
    import inductor_addmm_fix as fix
    trigger_before = any(p.name == "core.meta_trigger" and p.applied for p in fix.status().patches)
    meta = dict(device="meta", dtype=torch.bfloat16)
    out = torch.baddbmm(torch.empty(2, 3, 5, device="meta"), torch.empty(2, 3, 4, **meta), torch.empty(2, 4, 5, **meta),
                        out_dtype=torch.float32)
    try:
        torch.mm(torch.empty(3, 4, **meta), torch.empty(4, 5, device="meta", dtype=torch.float16), out_dtype=torch.float32)
        mixed = "accepted"
    except RuntimeError as error:
        mixed = str(error)
    print(json.dumps(dict(trigger_before=trigger_before, dtype=str(out.dtype), shape=list(out.shape), mixed=mixed,
                          dynamo="torch._dynamo" in sys.modules,
                          trigger_after=any(p.name.startswith("core.meta_trigger") for p in fix.status().patches))))
"""


def test_the_first_eager_call_on_meta_tensors_meets_the_package_s_meta_kernels():
    """Before anything imports torch._dynamo, an eager call on meta tensors applies the
    tracing stage first: baddbmm.dtype gives its shape and dtype (torch's own meta kernel
    fails), mm.dtype rejects operands of two dtypes as eager does."""
    result = fresh("-c", textwrap.dedent(EAGER_META_FIRST))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["trigger_before"]
    assert report["dtype"] == "torch.float32" and report["shape"] == [2, 3, 5]
    assert "must have the same dtype" in report["mixed"]
    assert report["dynamo"] and not report["trigger_after"]  # the stage applied, its stand-in gone
