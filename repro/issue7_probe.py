#!/usr/bin/env python
"""
probe.py -- GPU probe for the suspected Inductor miscompile of Liger-Kernel 0.8.5
`liger_fused_linear_cross_entropy(..., ce_weight=cw, reduction="sum")` under torch.compile.

Needs only torch + triton + liger_kernel (no network).  Target: 1x H200, torch 2.11.0+cu130,
triton 3.6.0, liger-kernel 0.8.5.  Budget: ~3 minutes (rows are priority ordered; rows that
would start after the budget are reported as SKIPPED).

Usage:
    OUT=/some/dir python probe.py                 # orchestrator (default)
    python probe.py --list                        # list rows
    python probe.py --only 2,7                    # subset of rows (by index)
Liger import: uses an installed `liger_kernel`; otherwise set LIGER_PATH=<dir containing the
`liger_kernel` package> or LIGER_WHEEL=<path to liger_kernel-*.whl> (unzipped to a temp dir).
The script also searches ./liger085, ./wheels/liger_kernel-0.8.5*.whl, /work/wheels/...

Robustness: every row runs inside try/except in a *worker* subprocess.  If a row leaves the
CUDA context broken (illegal memory access is sticky) or the worker dies, the orchestrator
restarts a fresh worker at the next row.  Each row recompiles from scratch (dynamo reset,
FX-graph/AOT caches off) on fresh copies of the inputs.

Files written under $OUT (<= 6):
    probe_results.json            all rows (machine-readable) + environment
    post_grad_graph_flce.txt      post-grad FX graph(s) of the baseline compiled FLCE call
    output_code_flce.txt          Inductor output code of the baseline compiled FLCE call
    output_code_minimal.txt       Inductor output code of the no-Liger minimal repros
    worker_stderr.txt             worker stderr (warnings, tracebacks), truncated
"""
import argparse
import contextlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
B, T, H, V = 4, 47, 31, 123
SEED = 0
# Inputs of the issue; chunking inside Liger gives chunks [0:64], [64:128], [128:188].


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------
def _import_liger():
    forced = os.environ.get("PROBE_FORCE_LIGER_PATH")
    if forced:
        sys.path.insert(0, forced)
        import liger_kernel  # noqa: F401
        return forced
    try:
        import liger_kernel  # noqa: F401
        return "installed"
    except Exception:
        pass
    cands = []
    if os.environ.get("LIGER_PATH"):
        cands.append(os.environ["LIGER_PATH"])
    wheel = os.environ.get("LIGER_WHEEL")
    if not wheel:
        import glob
        for pat in (os.path.join(HERE, "wheels", "liger_kernel-0.8.5*.whl"),
                    os.path.join(HERE, "liger_kernel-0.8.5*.whl"),
                    "/work/wheels/liger_kernel-0.8.5*.whl"):
            g = sorted(glob.glob(pat))
            if g:
                wheel = g[0]
                break
    cands += [os.path.join(HERE, "liger085"), "/work/issue7/liger085"]
    for c in cands:
        if c and os.path.isdir(os.path.join(c, "liger_kernel")):
            sys.path.insert(0, c)
            import liger_kernel  # noqa: F401
            return c
    if wheel and os.path.exists(wheel):
        import zipfile
        d = tempfile.mkdtemp(prefix="liger_whl_")
        zipfile.ZipFile(wheel).extractall(d)
        sys.path.insert(0, d)
        import liger_kernel  # noqa: F401
        return wheel
    raise ImportError("liger_kernel not importable; set LIGER_PATH or LIGER_WHEEL")


def close(a, b, rtol=1e-4, atol=1e-3):
    if not (isinstance(a, float) and isinstance(b, float)):
        return False
    if math.isnan(a) or math.isnan(b):
        return False
    return abs(a - b) <= atol + rtol * abs(b)


@contextlib.contextmanager
def patched_configs(icfg=None, dcfg=None, fcfg=None):
    import torch
    import torch._inductor.config as ic
    stack = contextlib.ExitStack()
    with stack:
        if icfg:
            stack.enter_context(ic.patch(icfg))
        if dcfg:
            stack.enter_context(torch._dynamo.config.patch(dcfg))
        if fcfg:
            stack.enter_context(torch._functorch.config.patch(fcfg))
        yield


@contextlib.contextmanager
def capture_artifacts(names):
    """Capture torch._logging artifacts (e.g. post_grad_graphs, output_code) into strings.
    Handlers are attached directly to the artifact loggers (torch's top-level loggers do not
    propagate to the root 'torch' logger)."""
    import torch
    for m in ("torch._inductor.compile_fx", "torch._inductor.graph", "torch._inductor.codecache"):
        try:
            __import__(m)
        except Exception:
            pass
    bufs = {n: io.StringIO() for n in names}
    seen = set()

    class _H(logging.Handler):
        def emit(self, rec):
            if id(rec) in seen:
                return
            seen.add(id(rec))
            for n in names:
                if rec.name.endswith("__" + n):
                    try:
                        bufs[n].write(rec.getMessage() + "\n")
                    except Exception:
                        pass

    h = _H(level=logging.DEBUG)
    torch._logging.set_logs(**{n: True for n in names})
    targets = [lg for nm, lg in list(logging.root.manager.loggerDict.items())
               if isinstance(lg, logging.Logger) and any(nm.endswith("__" + n) for n in names)]
    targets += [logging.getLogger("torch._inductor"), logging.getLogger("torch")]
    for lg in targets:
        lg.addHandler(h)
    try:
        yield bufs
    finally:
        for lg in targets:
            lg.removeHandler(h)
        torch._logging.set_logs()


class WarnCounter(logging.Handler):
    """Counts 'identify_mutated_tensors ... assuming every input is mutated' warnings."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.n = 0
        self._seen = set()

    def emit(self, rec):
        try:
            if id(rec) in self._seen:
                return
            self._seen.add(id(rec))
            if "assuming every input is mutated" in rec.getMessage():
                self.n += 1
        except Exception:
            pass


_WC_LOGGERS = ("torch._dynamo", "torch._higher_order_ops.triton_kernel_wrap")


def _add_wc(wc):
    for n in _WC_LOGGERS:
        logging.getLogger(n).addHandler(wc)


def _rm_wc(wc):
    for n in _WC_LOGGERS:
        logging.getLogger(n).removeHandler(wc)


# ----------------------------------------------------------------------------------------
# Patches used by hypothesis rows
# ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def patch_truthful_mutation_analysis():
    """H2 check: make torch's TTIR mutation analysis return what the Liger CE kernel really
    writes (X_ptr, loss_ptr [+ optional outputs]) instead of the 'everything is mutated'
    fallback it takes for HAS_WEIGHT=True (`sum_non_ignore_weight.to(tl.float32)` on a value
    that generate_ttir turned into a Python constexpr raises AttributeError)."""
    import torch._higher_order_ops.triton_kernel_wrap as tkw
    orig = tkw.identify_mutated_tensors

    def truthful(kernel, kwargs, *a, **k):
        fn = getattr(kernel, "fn", None)
        name = getattr(fn, "__name__", "")
        if name == "liger_cross_entropy_kernel":
            outs = ("X_ptr", "loss_ptr", "z_loss_ptr", "token_accuracy_ptr", "predicted_tokens_ptr")
            return [n for n in outs if kwargs.get(n) is not None]
        if name == "min_gather_scale_kernel":
            return ["OUT_ptr"]
        return orig(kernel, kwargs, *a, **k)

    tkw.identify_mutated_tensors = truthful
    try:
        yield
    finally:
        tkw.identify_mutated_tensors = orig


@contextlib.contextmanager
def patch_realize_view_base_for_as_strided():
    """H1 check (candidate fix): when an FX slice/select node feeds aten.as_strided*, realize the
    *base* before lowering the view.  The view then lowers to a ReinterpretView that keeps the
    base storage + storage_offset, instead of GraphLowering.run_node's `is_input_for_as_strided`
    -> ExternKernel.require_stride_order -> copy_input() materialising the view into a fresh,
    offset-0, view-sized buffer that as_strided(size=offset+extent, storage_offset=0) then
    reads past the end of."""
    import torch
    from torch._inductor import ir
    from torch._inductor import lowering as L
    from torch._inductor.virtualized import V
    A = torch.ops.aten
    AS = {A.as_strided.default, A.as_strided_.default, A.as_strided_scatter.default}
    saved = {}
    for op in (A.slice.Tensor, A.select.int):
        orig = L.lowerings[op]
        saved[op] = orig

        def wrapped(x, *args, __orig=orig, **kwargs):
            try:
                node = V.graph.current_node
                if node is not None and any(u.target in AS for u in node.users) and isinstance(x, ir.TensorBox):
                    x.realize()
            except Exception:
                pass
            return __orig(x, *args, **kwargs)

        L.lowerings[op] = wrapped
    try:
        yield
    finally:
        for op, f in saved.items():
            L.lowerings[op] = f


# ----------------------------------------------------------------------------------------
# Minimal (no Liger) reproductions
# ----------------------------------------------------------------------------------------
def _min_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def min_gather_scale_kernel(Y_ptr, X_ptr, OUT_ptr, scale, n, nx,
                                BLOCK: tl.constexpr, CAST: tl.constexpr, EVEN_ONLY: tl.constexpr):
        # Same shape of code as liger_cross_entropy_kernel:
        #  * reads an int64 "target" slice (Y_ptr) and uses it as an index
        #  * writes an output slice (OUT_ptr) that is a view of a bigger buffer
        #  * optional `scalar.to(tl.float32)` (Liger 0.8.5 HAS_WEIGHT branch).  torch<=2.12's
        #    generate_ttir turns scalar args into constexprs, so this line makes the TTIR
        #    mutation analysis throw -> "assuming every input is mutated" -> Y_ptr is cloned.
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        if CAST:
            scale = scale.to(tl.float32)
        y = tl.load(Y_ptr + offs, mask=m, other=0)
        ok = (y >= 0) & (y < nx)               # keep garbage indices in-bounds (no IMA)
        y = tl.where(ok, y, 0)
        v = tl.load(X_ptr + y, mask=m, other=0.0)
        v = tl.where(ok, v, -1.0e6)            # make garbage targets visible in the result
        if EVEN_ONLY:
            m = m & ((offs % 2) == 0)          # like ignore_index rows: some slots never written
        tl.store(OUT_ptr + offs, v * scale, mask=m)

    return min_gather_scale_kernel


_MIN_KERNEL = None


def min_triton_fn_factory(cast, even_only, chunk=64):
    import triton
    global _MIN_KERNEL
    if _MIN_KERNEL is None:
        _MIN_KERNEL = _min_triton_kernel()
    k = _MIN_KERNEL

    def fn(x, y, out):
        n = y.shape[0]
        for s in range(0, n, chunk):
            e = min(s + chunk, n)
            k[(triton.cdiv(e - s, 64),)](y[s:e], x, out[s:e], 0.5, e - s, x.shape[0],
                                         BLOCK=64, CAST=cast, EVEN_ONLY=even_only)
        return out.sum()

    return fn


def min_torch_fns():
    import torch

    def as_strided_of_slice_of_pointwise(base):
        s = base + 1                                   # unrealized Pointwise in Inductor
        v = s[64:128]                                  # view, storage_offset=64
        return torch.as_strided(v, (128,), (1,), 0).clone()   # == s[0:128]

    def clone_preserve_strides_pattern(base, src):
        # exactly what decompose_triton_kernel_wrapper_functional emits for a cloned slice arg
        s = torch.slice_scatter(base, src, 0, 0, 64)   # unrealized Pointwise
        v = s[64:128]
        buf = torch.as_strided(v, (128,), (1,), 0).clone()
        return torch.as_strided(buf, (64,), (1,), 64) * 1.0

    return as_strided_of_slice_of_pointwise, clone_preserve_strides_pattern


# ----------------------------------------------------------------------------------------
# Rows
# ----------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, device, out_dir):
        self.device = device
        self.out_dir = out_dir


def make_inputs(device, ign=False):
    import torch
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(B * T, H, generator=g)
    w = torch.randn(V, H, generator=g)
    t = torch.randint(V, (B * T,), generator=g)
    cw = torch.rand(V, generator=g)
    if ign:
        t[::7] = -100
    return x.to(device), w.to(device), t.to(device), cw.to(device)


def row_env(ctx):
    import torch
    import triton
    import liger_kernel
    d = dict(torch=torch.__version__, triton=triton.__version__,
             liger=getattr(liger_kernel, "__version__", None) or _liger_version(),
             liger_path=os.path.dirname(liger_kernel.__file__), python=sys.version.split()[0])
    if ctx.device == "cuda" and torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name(0)
        d["capability"] = torch.cuda.get_device_capability(0)
    return dict(verdict="INFO", info=d)


def _liger_version():
    try:
        from importlib.metadata import version
        return version("liger_kernel")
    except Exception:
        return None


def row_mutation_analysis(ctx):
    """Which args does torch think liger_cross_entropy_kernel mutates? (H2)"""
    import torch
    import torch._higher_order_ops.triton_kernel_wrap as tkw
    from liger_kernel.ops.cross_entropy import liger_cross_entropy_kernel as k
    dev = ctx.device
    res = {}
    wc = WarnCounter()
    _add_wc(wc)
    try:
        for hw in (False, True):
            kw = dict(X_ptr=torch.empty(64, V, device=dev), X_stride=V,
                      Y_ptr=torch.zeros(64, dtype=torch.long, device=dev), Y_stride=1,
                      weight_ptr=torch.rand(V, device=dev) if hw else None,
                      loss_ptr=torch.zeros(64, device=dev), z_loss_ptr=None, loss_stride=1,
                      token_accuracy_ptr=None, token_accuracy_stride=0,
                      predicted_tokens_ptr=None, predicted_tokens_stride=0,
                      n_cols=V, n_non_ignore=188, sum_non_ignore_weight=(93.5 if hw else 188),
                      weight_sum=(61.2 if hw else 0.0), ignore_index=-100, lse_square_scale=0.0,
                      label_smoothing=0.0, reduction="sum", softcap=None, RETURN_Z_LOSS=False,
                      RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
                      BLOCK_SIZE=128, HAS_WEIGHT=hw, HAS_SOFTCAPPING=False, HAS_GRADIENTS=True)
            before = wc.n
            try:
                fn = getattr(tkw, "identify_mutated_tensors", None)
                if fn is None:
                    res[f"HAS_WEIGHT={hw}"] = "identify_mutated_tensors not found in this torch"
                    continue
                r = fn(k, kw, {})
                res[f"HAS_WEIGHT={hw}"] = dict(mutated=list(r), fallback_warning=wc.n > before)
            except Exception as e:
                res[f"HAS_WEIGHT={hw}"] = f"EXC {type(e).__name__}: {e}"
    finally:
        _rm_wc(wc)
    bad = any(isinstance(v, dict) and ("Y_ptr" in v["mutated"] or "weight_ptr" in v["mutated"])
              for v in res.values())
    return dict(verdict="H2-CONFIRMED" if bad else "H2-not-seen", info=res)


def run_flce(ctx, backend="inductor", cw=True, ign=False, reduction="sum", icfg=None, dcfg=None,
             fcfg=None, patches=(), ncalls=2, dump=False, same_inputs=False):
    """same_inputs=True reproduces the issue protocol (same tensors on every call, so a
    corrupted `t` carries over); otherwise every call gets fresh copies of x, w, t, cw."""
    import torch
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as flce
    dev = ctx.device
    x0, w0, t0, c0 = make_inputs(dev, ign)

    def fn(x, w, t, c):
        return flce(x, w, t, ce_weight=c if cw else None, reduction=reduction)

    def fresh():
        return (x0.clone().requires_grad_(True), w0.clone().requires_grad_(True), t0.clone(), c0.clone())

    eager = fn(*fresh()).item()
    ref_torch = torch.nn.functional.cross_entropy(
        x0 @ w0.t(), t0, weight=c0 if cw else None, reduction=reduction).item()
    x, w, t, c = fresh()
    calls = []
    wc = WarnCounter()
    _add_wc(wc)
    arts = None
    try:
        with contextlib.ExitStack() as st:
            st.enter_context(patched_configs(icfg, dcfg, fcfg))
            for p in patches:
                st.enter_context(p())
            if dump:
                arts = st.enter_context(capture_artifacts(["post_grad_graphs", "output_code"]))
            torch._dynamo.reset()
            cf = torch.compile(fn, backend=backend)
            for i in range(ncalls):
                if not same_inputs:
                    x, w, t, c = fresh()
                try:
                    v = cf(x, w, t, c).item()
                    if dev == "cuda":
                        torch.cuda.synchronize()
                except Exception as e:
                    v = f"EXC {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    if "CUDA" in str(e) or "illegal memory" in str(e):
                        calls.append(dict(call=i, loss=v))
                        raise
                ch = (t != t0).nonzero().flatten()
                rec = dict(call=i, loss=v, t_changed=int(ch.numel()), cw_changed=int((c != c0).sum()))
                if ch.numel():
                    rec["t_changed_idx_range"] = [int(ch.min()), int(ch.max())]
                calls.append(rec)
    finally:
        _rm_wc(wc)
        torch._dynamo.reset()
    # eager again with the (possibly corrupted by the compiled call) target tensor; on GPU a
    # corrupted t would trip a device-side assert in gather and poison the context -> skip.
    if dev != "cuda" or bool((t == t0).all()):
        try:
            eager_after = fn(x0.clone().requires_grad_(True), w0.clone().requires_grad_(True), t, c0.clone()).item()
        except Exception as e:
            eager_after = f"EXC {type(e).__name__}"
    else:
        eager_after = "skipped: t was modified by the compiled call"
    ok = all(close(cl.get("loss"), eager) and cl.get("t_changed", 1) == 0 and cl.get("cw_changed", 1) == 0
             for cl in calls) and len(calls) == ncalls
    out = dict(verdict="OK" if ok else "WRONG", eager=eager, torch_ref=ref_torch, calls=calls,
               eager_after_with_same_t=eager_after, mutation_fallback_warnings=wc.n)
    if dump and arts is not None and ctx.out_dir:
        pg = arts["post_grad_graphs"].getvalue()
        oc = arts["output_code"].getvalue()
        with open(os.path.join(ctx.out_dir, "post_grad_graph_flce.txt"), "w") as f:
            f.write(pg)
        with open(os.path.join(ctx.out_dir, "output_code_flce.txt"), "w") as f:
            f.write(oc)
        out["dump"] = dict(post_grad_chars=len(pg), output_code_chars=len(oc),
                           as_strided_kernels=sorted(set(_kernel_names(oc, "as_strided"))),
                           user_kernel_launches=oc.count("liger_cross_entropy_kernel_0.run("))
    return out


def _kernel_names(code, needle):
    import re
    return [m for m in re.findall(r"\b((?:triton|cpp)_\w+)\b", code) if needle in m]


def run_min_torch(ctx, patches=()):
    import torch
    dev = ctx.device
    f1, f2 = min_torch_fns()
    g = torch.Generator().manual_seed(1)
    base = torch.randn(188, generator=g).to(dev)
    src = torch.randn(64, generator=g).to(dev)
    res = {}
    with contextlib.ExitStack() as st:
        for p in patches:
            st.enter_context(p())
        for name, fn, args in (("as_strided(slice(pointwise))", f1, (base,)),
                               ("clone_preserve_strides(slice(slice_scatter))", f2, (base, src))):
            torch._dynamo.reset()
            ref = fn(*args)
            try:
                got = torch.compile(fn, backend="inductor")(*args)
                if dev == "cuda":
                    torch.cuda.synchronize()
                diff = (ref - got).abs()
                res[name] = dict(equal=bool(torch.equal(ref, got)),
                                 n_bad=int((~torch.isclose(ref, got)).sum()),
                                 max_abs_diff=float(diff[torch.isfinite(diff)].max()) if torch.isfinite(diff).any() else float("nan"))
            except Exception as e:
                res[name] = f"EXC {type(e).__name__}: {str(e)[:160]}"
                if "CUDA" in str(e):
                    raise
    torch._dynamo.reset()
    ok = all(isinstance(v, dict) and v["equal"] for v in res.values())
    return dict(verdict="OK" if ok else "WRONG", info=res)


def run_min_triton(ctx, cast, even_only, patches=(), dump=False):
    import torch
    dev = ctx.device
    g = torch.Generator().manual_seed(2)
    x = torch.randn(50, generator=g).to(dev)
    y0 = torch.randint(50, (188,), generator=g).to(dev)
    fn = min_triton_fn_factory(cast, even_only)
    out_e = torch.zeros(188, device=dev)
    ref = fn(x, y0.clone(), out_e).item()
    calls = []
    arts = None
    with contextlib.ExitStack() as st:
        for p in patches:
            st.enter_context(p())
        if dump:
            arts = st.enter_context(capture_artifacts(["output_code"]))
        torch._dynamo.reset()
        cf = torch.compile(fn, backend="inductor")
        y = y0.clone()
        for i in range(2):
            out_c = torch.zeros(188, device=dev)
            try:
                v = cf(x, y, out_c).item()
                if dev == "cuda":
                    torch.cuda.synchronize()
                calls.append(dict(call=i, sum=v, out_mismatch=int((~torch.isclose(out_c, out_e)).sum()),
                                  y_changed=int((y != y0).sum())))
            except Exception as e:
                calls.append(dict(call=i, sum=f"EXC {type(e).__name__}: {str(e)[:120]}"))
                if "CUDA" in str(e):
                    raise
    torch._dynamo.reset()
    if dump and arts is not None and ctx.out_dir:
        with open(os.path.join(ctx.out_dir, "output_code_minimal.txt"), "a") as f:
            f.write(f"\n\n######## min_triton cast={cast} even_only={even_only} ########\n")
            f.write(arts["output_code"].getvalue())
    ok = all(close(c.get("sum"), ref) and c.get("out_mismatch", 1) == 0 and c.get("y_changed", 1) == 0
             for c in calls)
    return dict(verdict="OK" if ok else "WRONG", eager=ref, calls=calls)


def _find_liger081():
    import glob
    import zipfile
    for d in (os.environ.get("LIGER081_PATH"), os.path.join(HERE, "liger081"), "/work/issue7/liger081"):
        if d and os.path.isdir(os.path.join(d, "liger_kernel")):
            return d
    cands = [os.environ.get("LIGER081_WHEEL")] + sorted(glob.glob(os.path.join(HERE, "wheels", "liger_kernel-0.8.1*.whl"))) \
        + sorted(glob.glob(os.path.join(HERE, "liger_kernel-0.8.1*.whl"))) + sorted(glob.glob("/work/wheels/liger_kernel-0.8.1*.whl"))
    for w in cands:
        if w and os.path.exists(w):
            d = tempfile.mkdtemp(prefix="liger081_")
            zipfile.ZipFile(w).extractall(d)
            return d
    return None


def row_liger081(ctx, rows=(2, 12)):
    """Same probe rows with Liger 0.8.1 (its CE kernel has no `scalar.to(tl.float32)` lines, so
    torch's mutation analysis succeeds and target/ce_weight are not cloned)."""
    d = _find_liger081()
    if d is None:
        return dict(verdict="SKIPPED", info="liger 0.8.1 not found (set LIGER081_PATH or LIGER081_WHEEL)")
    tmp = tempfile.mkdtemp(prefix="probe081_")
    rf = os.path.join(tmp, "rows.jsonl")
    env = dict(os.environ, PROBE_FORCE_LIGER_PATH=d, LIGER_PATH=d)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--only", ",".join(map(str, rows)),
           "--rows-file", rf, "--out", "", "--device", ctx.device]
    try:
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=240)
    except subprocess.TimeoutExpired:
        pass
    sub = _read_rows(rf)
    info = {}
    for r in sub:
        info[r["name"]] = dict(verdict=r.get("verdict"), eager=r.get("eager"),
                               calls=[c.get("loss") for c in r.get("calls", [])],
                               t_changed=[c.get("t_changed") for c in r.get("calls", [])],
                               mutfallback=r.get("mutation_fallback_warnings"), error=r.get("error"))
    verdicts = [v["verdict"] for v in info.values()]
    return dict(verdict="/".join(verdicts) if verdicts else "EXC", info=info, liger081_src=d)


def build_rows():
    """(name, hypothesis/what-it-proves, callable(ctx)->dict).  Priority ordered."""
    P_MUT = patch_truthful_mutation_analysis
    P_WA = patch_realize_view_base_for_as_strided
    R = []
    R.append(("env", "versions", row_env))
    R.append(("mutation_analysis", "H2: TTIR analysis falls back to all-mutated for HAS_WEIGHT", row_mutation_analysis))
    R.append(("inductor cw (baseline, dump)", "issue repro; dumps post-grad graph + output code",
              lambda c: run_flce(c, dump=True, ncalls=3, same_inputs=True)))
    R.append(("min torch as_strided(slice(pointwise))", "H1 root bug without Liger/Triton", lambda c: run_min_torch(c)))
    R.append(("min triton CAST=True", "H1+H2 minimal user-kernel repro (Y cloned via as_strided)",
              lambda c: run_min_triton(c, cast=True, even_only=False, dump=True)))
    R.append(("min triton CAST=False (control)", "mutation analysis works -> Y not cloned -> OK expected",
              lambda c: run_min_triton(c, cast=False, even_only=False, dump=True)))
    R.append(("min triton CAST=False EVEN_ONLY", "H1 alone: partially-written output slice of graph input",
              lambda c: run_min_triton(c, cast=False, even_only=True)))
    R.append(("inductor cw + truthful mutation analysis", "H2 is the ce_weight trigger -> OK expected",
              lambda c: run_flce(c, patches=(P_MUT,))))
    R.append(("inductor cw + realize-view-base fix", "H1 fix -> OK expected",
              lambda c: run_flce(c, patches=(P_WA,))))
    R.append(("aot_eager cw", "not a functionalization bug -> OK", lambda c: run_flce(c, backend="aot_eager")))
    R.append(("aot_eager_decomp_partition cw", "not a decomposition bug -> OK",
              lambda c: run_flce(c, backend="aot_eager_decomp_partition")))
    R.append(("inductor no-cw", "control (issue says OK)", lambda c: run_flce(c, cw=False)))
    R.append(("inductor no-cw + ignore_index rows", "H1 without H2: unwritten loss slots = garbage",
              lambda c: run_flce(c, cw=False, ign=True)))
    R.append(("inductor cw + ignore_index rows", "H1+H2", lambda c: run_flce(c, ign=True)))
    R.append(("inductor no-cw + ignore + realize-view-base fix", "H1 fix covers ignore case",
              lambda c: run_flce(c, cw=False, ign=True, patches=(P_WA,))))
    R.append(("min torch + realize-view-base fix", "H1 fix on minimal repro", lambda c: run_min_torch(c, patches=(P_WA,))))
    R.append(("min triton CAST=True + realize-view-base fix", "H1 fix on minimal triton repro",
              lambda c: run_min_triton(c, cast=True, even_only=False, patches=(P_WA,))))
    R.append(("liger 0.8.1: rows 2 and 12", "0.8.1 kernel: analysis OK -> cw OK; ignore rows still WRONG (H1)",
              row_liger081))
    R.append(("inductor cw allow_buffer_reuse=False", "H5 (buffer reuse) -> still WRONG expected",
              lambda c: run_flce(c, icfg={"allow_buffer_reuse": False})))
    R.append(("inductor cw memory_planning=True", "H5 -> still WRONG expected",
              lambda c: run_flce(c, icfg={"memory_planning": True})))
    R.append(("inductor cw reorder_for_locality=False", "H5/scheduling -> still WRONG expected",
              lambda c: run_flce(c, icfg={"reorder_for_locality": False})))
    R.append(("inductor cw triton.unique_kernel_names", "naming only -> still WRONG",
              lambda c: run_flce(c, icfg={"triton.unique_kernel_names": True})))
    R.append(("inductor cw realize_opcount_threshold=0", "H1 heuristic dodge (realize eagerly)",
              lambda c: run_flce(c, icfg={"realize_opcount_threshold": 0})))
    R.append(("inductor cw realize_acc_reads_threshold=1", "H1 heuristic dodge",
              lambda c: run_flce(c, icfg={"realize_acc_reads_threshold": 1})))
    R.append(("inductor cw capture_dynamic_output_shape_ops", "graph break at masked_select not needed -> WRONG",
              lambda c: run_flce(c, dcfg={"capture_dynamic_output_shape_ops": True})))
    R.append(("inductor cw triton.cudagraphs=True", "cudagraphs (mutated inputs -> likely skipped)",
              lambda c: run_flce(c, icfg={"triton.cudagraphs": True})))
    R.append(("inductor cw reduction=mean", "uses the .item() SymFloats in-kernel",
              lambda c: run_flce(c, reduction="mean")))
    return R


# ----------------------------------------------------------------------------------------
# worker / orchestrator
# ----------------------------------------------------------------------------------------
def worker(args):
    import torch
    src = _import_liger()
    import torch._dynamo
    import torch._inductor.config as ic
    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.cache_size_limit = 64
    ic.fx_graph_cache = False
    try:
        torch._functorch.config.enable_autograd_cache = False
    except Exception:
        pass
    if os.environ.get("PROBE_CPU_EMU") == "1":   # CPU dry-run support (validation without a GPU)
        sys.path.insert(0, os.path.join(HERE, "cpu"))
        import emu  # noqa: F401
        import emu_min  # noqa: F401
    ctx = Ctx(args.device, args.out)
    rows = build_rows()
    only = set(int(i) for i in args.only.split(",")) if args.only else None
    deadline = args.deadline
    for idx in range(args.start, len(rows)):
        if only is not None and idx not in only:
            continue
        name, hyp, fn = rows[idx]
        rec = dict(idx=idx, name=name, hypothesis=hyp)
        if deadline and time.time() > deadline:
            rec.update(verdict="SKIPPED", info="time budget")
            _emit(args.rows_file, rec)
            continue
        t0 = time.time()
        sticky = False
        try:
            rec.update(fn(ctx))
        except Exception as e:
            rec.update(verdict="EXC", error=f"{type(e).__name__}: {str(e)[:300]}",
                       tb=traceback.format_exc()[-1500:])
            sticky = "CUDA" in str(e) or "illegal memory" in str(e)
        if args.device == "cuda":
            try:
                torch.cuda.synchronize()
            except Exception as e:
                sticky = True
                rec.setdefault("error", f"post-row sync: {type(e).__name__}: {str(e)[:200]}")
        rec["seconds"] = round(time.time() - t0, 1)
        rec["liger_src"] = src
        _emit(args.rows_file, rec)
        print(f"[row {idx}] {name}: {rec.get('verdict')} ({rec['seconds']}s)", file=sys.stderr, flush=True)
        if sticky:
            os._exit(3)   # CUDA context is poisoned -> orchestrator restarts at idx+1
    os._exit(0)


def _emit(path, rec):
    with open(path, "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def fmt_row(r):
    v = r.get("verdict", "?")
    detail = ""
    if "calls" in r:
        parts = []
        for c in r["calls"]:
            val = c.get("loss", c.get("sum"))
            s = f"{val:.4f}" if isinstance(val, float) else str(val)[:40]
            extra = []
            if c.get("t_changed"):
                extra.append(f"t!{c['t_changed']}")
            if c.get("y_changed"):
                extra.append(f"y!{c['y_changed']}")
            if c.get("out_mismatch"):
                extra.append(f"out!{c['out_mismatch']}")
            parts.append(s + ("[" + ",".join(extra) + "]" if extra else ""))
        ref = r.get("eager")
        detail = f"eager={ref:.4f} " if isinstance(ref, float) else ""
        detail += "compiled=" + " | ".join(parts)
        if r.get("mutation_fallback_warnings"):
            detail += f" mutfallback={r['mutation_fallback_warnings']}"
    elif "info" in r:
        detail = json.dumps(r["info"], default=str)[:220]
    elif "error" in r:
        detail = r["error"][:200]
    return f"{r.get('idx', '?'):>2} {v:<13} {r.get('name', '')[:48]:<48} {detail}"


def orchestrate(args):
    out = args.out or os.environ.get("OUT") or os.path.join(HERE, "probe_out")
    os.makedirs(out, exist_ok=True)
    for fn in ("output_code_minimal.txt",):
        p = os.path.join(out, fn)
        if os.path.exists(p):
            os.remove(p)
    tmpd = tempfile.mkdtemp(prefix="probe_rows_")
    rows_file = os.path.join(tmpd, "rows.jsonl")
    err_path = os.path.join(out, "worker_stderr.txt")
    t_start = time.time()
    deadline = t_start + args.budget
    n_rows = len(build_rows())
    start = 0
    restarts = 0
    with open(err_path, "w") as errf:
        while start < n_rows and restarts < 8:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--start", str(start),
                   "--rows-file", rows_file, "--out", out, "--device", args.device,
                   "--deadline", str(deadline)]
            if args.only:
                cmd += ["--only", args.only]
            timeout = max(30, deadline - time.time() + 60)
            try:
                p = subprocess.run(cmd, stdout=errf, stderr=errf, timeout=timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            done = _read_rows(rows_file)
            last = max([r["idx"] for r in done], default=start - 1)
            if rc == 0:
                break
            # worker died/poisoned: restart after the last recorded row (or skip the crashing one)
            crashed_idx = last + 1 if not done or done[-1]["idx"] == last else last
            if rc != 3:
                _emit(rows_file, dict(idx=crashed_idx, name=f"(worker died rc={rc})", verdict="CRASH"))
                last = crashed_idx
            start = last + 1
            restarts += 1
    rows = _read_rows(rows_file)
    # keep last record per idx
    by = {}
    for r in rows:
        by[r["idx"]] = r
    rows = [by[k] for k in sorted(by)]
    # truncate stderr file
    try:
        with open(err_path) as f:
            s = f.read()
        if len(s) > 400_000:
            with open(err_path, "w") as f:
                f.write(s[:100_000] + "\n...[truncated]...\n" + s[-300_000:])
    except Exception:
        pass
    with open(os.path.join(out, "probe_results.json"), "w") as f:
        json.dump(dict(rows=rows, wall_s=round(time.time() - t_start, 1)), f, indent=1, default=str)
    print("\n==================== PROBE RESULTS (compact) ====================")
    print("idx verdict       row                                              detail")
    for r in rows:
        print(fmt_row(r))
    print(f"total wall {time.time() - t_start:.1f}s; files in {out}: {sorted(os.listdir(out))}")


def _read_rows(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except Exception:
                    pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", default="")
    ap.add_argument("--rows-file", default="")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--device", default=os.environ.get("PROBE_DEVICE", "cuda"))
    ap.add_argument("--deadline", type=float, default=0.0)
    ap.add_argument("--budget", type=float, default=float(os.environ.get("PROBE_BUDGET_S", "170")))
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for i, (n, h, _) in enumerate(build_rows()):
            print(f"{i:>2} {n:<50} {h}")
        return
    if args.worker:
        worker(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
