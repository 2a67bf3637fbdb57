"""Decide, from probes of the installed torch, which patches it needs.

Each tier is planned on its own: ``plan_core()`` (Tier 1, needs only ``torch``)
and ``plan_inductor()`` (Tier 2, needs ``torch._inductor``).  A plan is a list of
:class:`Decision`: every candidate patch, applied or not, with the reason, so that
``status()`` can say why.  A probe that finds torch shaped unlike anything we
know raises :class:`PlanError`; the caller then warns and applies nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from . import _torch_features as features
from ._registry import (
    ABSENT,
    ConfigValue,
    DictEntry,
    DispatcherKernel,
    PassInConfig,
    Patch,
    PyKernel,
    TagInConfigDefault,
    TagInString,
)

CORE = "core"
INDUCTOR = "inductor"

#: Upstream changes that retire the patches (named in status() and the README).
PR_CORE_ADDMM = "pytorch/pytorch#179634 (torch 2.13): dedicated addmm_dtype decomposition"
PR_CORE_BADDBMM = "none yet: baddbmm is registered packet-wide up to torch 2.15"
PR_META_MM = "pytorch/pytorch#163393 (torch 2.10): meta_mm takes out_dtype"
PR_META_CHECKS = "none yet: the stock meta kernels check fewer preconditions than the eager kernels"
PR_INDUCTOR = "pytorch/pytorch#190936 (open): Inductor stops claiming the .dtype overloads"
PR_AS_STRIDED = "pytorch/pytorch#161115 (PR #184050, reverted): Triton-kernel clones of views"
PR_REINPLACE = "none yet: Inductor's reinplace pass has no addmm entries (torch 2.15)"
PR_POST_GRAD = (
    "none known: functionalized graphs keep no order between chunks that reuse one out= buffer, "
    "and Inductor writes each slice_scatter over the whole buffer"
)
PR_CACHE = "when the compile caches key on the lowering tables (no upstream change yet)"


class PlanError(RuntimeError):
    """The installed torch does not look like any release we know how to patch."""


@dataclasses.dataclass
class Decision:
    name: str
    tier: str
    needed: bool
    reason: str
    obsolete_when: str
    patches: list[Patch] = dataclasses.field(default_factory=list)


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise PlanError(f"this torch ({torch.__version__}) has no {what}")


# ---------------------------------------------------------------- Tier 1
def plan_core() -> list[Decision]:
    from torch._decomp import decomposition_table, meta_table

    from . import tier1_core_decompositions as t1

    _require(features.has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    decisions = []
    for name in features.FAMILY:
        ops = (features.overload(name), features.overload(name, "dtype_out"))
        obsolete = {"addmm": PR_CORE_ADDMM, "baddbmm": PR_CORE_BADDBMM}.get(name, PR_META_MM)

        decomposition_ok = features.core_decomposition_works(name)
        if decomposition_ok is False:
            _require(name in t1.DECOMPOSITIONS, f"known fix for the {name}.dtype decomposition")
            fn = t1.DECOMPOSITIONS[name]
            decisions.append(
                Decision(
                    f"core.decomposition.{name}.dtype",
                    CORE,
                    True,
                    "the core decomposition registered for the packet drops out_dtype "
                    "(it binds it to beta)",
                    obsolete,
                    [
                        Patch(
                            f"core.decomposition.{op._overloadname}.{name}",
                            CORE,
                            DictEntry(decomposition_table, op, "torch._decomp.decomposition_table"),
                            fn,
                            "legacy packet decomposition",
                            obsolete,
                        )
                        for op in ops
                    ],
                )
            )
        else:
            decisions.append(
                Decision(
                    f"core.decomposition.{name}.dtype",
                    CORE,
                    False,
                    "no core decomposition" if decomposition_ok is None else "stock keeps out_dtype",
                    obsolete,
                )
            )

        works = features.meta_kernel_works(name)
        accepted = features.meta_kernel_accepts(name) if works else []
        if works and not accepted:
            decisions.append(
                Decision(
                    f"core.meta.{name}.dtype",
                    CORE,
                    False,
                    "stock meta kernel keeps out_dtype and rejects what eager rejects",
                    obsolete,
                )
            )
            continue
        if works:
            # Eager rejects these; a meta kernel that lets them through makes
            # compiled code accept them too (or fail late, in Inductor).
            reason = "the meta kernel accepts " + ", ".join(accepted) + ", which eager rejects"
            obsolete = PR_META_CHECKS
        else:
            reason = "the meta kernel fails on out_dtype, so FakeTensor (Dynamo tracing) fails"
        _require(name in t1.META_KERNELS, f"known fix for the {name}.dtype meta kernel")
        patches = []
        for op, meta in zip(ops, t1.META_KERNELS[name]):
            # FakeTensor looks in meta_table first and then runs the Meta kernel.
            patches.append(
                Patch(
                    f"core.meta_table.{name}.{op._overloadname}",
                    CORE,
                    DictEntry(meta_table, op, "torch._decomp.meta_table"),
                    meta,
                    "FakeTensor would run the broken decomposition",
                    obsolete,
                )
            )
            patches.append(
                Patch(
                    f"core.meta_kernel.{name}.{op._overloadname}",
                    CORE,
                    DispatcherKernel(f"{name}.{op._overloadname}"),
                    meta,
                    "the Meta dispatch key runs the broken function",
                    obsolete,
                )
            )
            patches.append(
                Patch(
                    f"core.meta_py_kernel.{name}.{op._overloadname}",
                    CORE,
                    PyKernel(op, torch._C.DispatchKey.Meta),
                    meta,
                    "the Python dispatcher (on under Dynamo) runs the broken function",
                    obsolete,
                )
            )
        decisions.append(
            Decision(f"core.meta.{name}.dtype", CORE, True, reason, obsolete, patches)
        )
    return decisions


# ---------------------------------------------------------------- Tier 2
def plan_inductor(package_version: str) -> list[Decision]:
    try:
        from torch._inductor import decomposition as inductor_decomposition
        from torch._inductor import lowering as L
    except Exception as error:  # pragma: no cover - depends on the torch build
        raise PlanError(f"torch._inductor cannot be imported: {error}") from error

    from . import tier2_inductor_decompositions as t2d
    from . import tier2_inductor_lowerings as t2l

    decompositions = getattr(inductor_decomposition, "decompositions", None)
    lowerings = getattr(L, "lowerings", None)
    _require(isinstance(decompositions, dict), "torch._inductor.decomposition.decompositions dict")
    _require(isinstance(lowerings, dict), "torch._inductor.lowering.lowerings dict")
    _require(
        features.takes_parameter(L.register_lowering, "lowering_dict") is True,
        "register_lowering(lowering_dict=...)",
    )
    for helper in ("fallback_handler", "to_dtype"):
        _require(callable(getattr(L, helper, None)), f"torch._inductor.lowering.{helper}")

    decisions = []
    for name in features.FAMILY:
        op = features.overload(name)

        # Tier 2a: the decomposition table.
        name_2a = f"inductor.decomposition.{name}.dtype"
        if features.is_packet_wide(decompositions, name):
            stock_name, factory = t2d.SMALL_SHAPE_DECOMPOSITIONS[name]
            stock = decompositions.get(features.overload(stock_name, "default"))
            _require(stock is not None, f"Inductor decomposition for {stock_name}")
            decisions.append(
                Decision(
                    name_2a,
                    INDUCTOR,
                    True,
                    "Inductor's packet-wide decomposition drops out_dtype for small shapes",
                    PR_INDUCTOR,
                    [
                        Patch(
                            name_2a,
                            INDUCTOR,
                            DictEntry(decompositions, op, "torch._inductor.decomposition.decompositions"),
                            factory(stock),
                            "packet-wide decomposition",
                            PR_INDUCTOR,
                        )
                    ],
                )
            )
        else:
            reason = "no Inductor decomposition" if op not in decompositions else "dedicated entry"
            decisions.append(Decision(name_2a, INDUCTOR, False, reason, PR_INDUCTOR))

        # Tier 2b: the lowering table.
        name_2b = f"inductor.lowering.{name}.dtype"
        current = lowerings.get(op, ABSENT)
        if current is not ABSENT and not features.is_packet_wide(lowerings, name):
            decisions.append(Decision(name_2b, INDUCTOR, False, "dedicated lowering", PR_INDUCTOR))
            continue
        if name in ("mm", "bmm"):
            fn = t2l.make_product_lowering(name, current if current is not ABSENT else None)
            why = f"tuned_{name} allows out_dtype on CUDA/XPU only" + (
                " and not at all on this torch" if not features.inductor_kernel_takes_out_dtype(name) else ""
            )
        else:
            fn = t2l.make_accumulate_lowering(name, {"addmm": "mm", "baddbmm": "bmm"}[name])
            why = f"tuned_{name} is registered packet-wide and takes no out_dtype"
        decisions.append(
            Decision(
                name_2b,
                INDUCTOR,
                True,
                why,
                PR_INDUCTOR,
                [
                    Patch(
                        name_2b,
                        INDUCTOR,
                        DictEntry(lowerings, op, "torch._inductor.lowering.lowerings"),
                        t2l.as_registered_lowering(op, fn),
                        why,
                        PR_INDUCTOR,
                    )
                ],
            )
        )

    decisions += _plan_reinplace(lowerings)
    decisions.append(_plan_as_strided_views(lowerings))
    decisions.append(_plan_post_grad_passes())
    decisions.append(_plan_cache_key(package_version, decisions))
    return decisions


def _plan_as_strided_views(lowerings: dict) -> Decision:
    """Tier 2d: as_strided of a slice of an unrealized buffer (issue 7)."""
    from . import tier2_inductor_as_strided as t2s

    name = "inductor.as_strided_of_view"
    if not t2s.run_node_copies_views_for_as_strided():
        return Decision(name, INDUCTOR, False, "run_node has no as_strided copy path", PR_AS_STRIDED)
    patches = []
    for qualname in t2s.VIEW_OPS:
        packet, overload = qualname.split(".")
        op = aten_op(packet, overload)
        stock = lowerings.get(op)
        _require(stock is not None, f"Inductor lowering for aten.{qualname}")
        patches.append(
            Patch(
                f"{name}.{qualname}",
                INDUCTOR,
                DictEntry(lowerings, op, "torch._inductor.lowering.lowerings"),
                t2s.realize_base_before_view(stock),
                "a slice feeding as_strided is copied to offset 0, and as_strided reads past it",
                PR_AS_STRIDED,
            )
        )
    return Decision(
        name,
        INDUCTOR,
        True,
        "as_strided of a slice of an unrealized buffer reads past a copy (wrong, changing "
        "Liger FLCE losses with ignore_index or class weights)",
        PR_AS_STRIDED,
        patches,
    )


def _plan_post_grad_passes() -> Decision:
    """Tiers 2f and 2e: the plugin's post-grad passes (issue 8)."""
    import torch._inductor.config as inductor_config

    from . import tier2_inductor_post_grad as t2p

    name = "inductor.post_grad_passes"
    if not t2p.supported():
        return Decision(
            name,
            INDUCTOR,
            False,
            "no post_grad_custom_post_pass / CustomGraphPass in this torch",
            PR_POST_GRAD,
        )
    slot = PassInConfig(
        inductor_config,
        "post_grad_custom_post_pass",
        "torch._inductor.config",
        per_thread=features.config_is_per_thread(inductor_config, "post_grad_custom_post_pass"),
        wrap=t2p.make_chained_pass,
        is_ours=t2p.is_chained_pass,
    )
    passes = [name for name, _ in t2p.plugin_passes()]
    why = (
        "chunked loops (FLCE) write each chunk's slice of one buffer with a kernel over the "
        "whole buffer (2f: one cat instead, slice-sized writes)"
    )
    if "chunk_order" in passes:
        why += (
            "; they lose their chunk order in functionalization and Inductor hoists every "
            "chunk's logits matmul, all chunks' logits alive at once (2e: control_deps "
            "restore the order)"
        )
    else:
        why += "; chunk order (2e) needs preserve_node_ordering / control_deps (torch 2.10+)"
    return Decision(
        name,
        INDUCTOR,
        True,
        f"post-grad passes {', '.join(passes)}: " + why,
        PR_POST_GRAD,
        [Patch(name, INDUCTOR, slot, t2p.make_chained_pass, why, PR_POST_GRAD, derive=True)],
    )


def _plan_reinplace(lowerings: dict) -> list[Decision]:
    """Tier 2c: accumulation chains of addmm / addmm.dtype run in place."""
    from . import tier2_inductor_lowerings as t2l
    from . import tier2_inductor_reinplace as t2r

    try:
        from torch._inductor.fx_passes import reinplace
    except Exception as error:  # pragma: no cover - depends on the torch build
        raise PlanError(f"torch._inductor.fx_passes.reinplace cannot be imported: {error}") from error
    table = getattr(reinplace, "inplaceable_ops", None)
    _require(isinstance(table, dict), "torch._inductor.fx_passes.reinplace.inplaceable_ops dict")
    _require(
        features.takes_parameter(reinplace.InplaceableOp, "extra_check") is True,
        "InplaceableOp(extra_check=...)",
    )
    decisions = []
    for functional, make_inplace, lower in (
        (aten_op("addmm", "dtype"), t2r.addmm_dtype_inplace, t2r.lower_addmm_dtype_),
        (aten_op("addmm", "default"), lambda: torch.ops.aten.addmm_.default, t2r.lower_addmm_),
    ):
        name = f"inductor.reinplace.addmm.{functional._overloadname}"
        if functional in table:
            decisions.append(Decision(name, INDUCTOR, False, "Inductor already re-inplaces it", PR_REINPLACE))
            continue
        inplace = make_inplace()
        patches = [
            Patch(
                name,
                INDUCTOR,
                DictEntry(table, functional, "torch._inductor.fx_passes.reinplace.inplaceable_ops"),
                reinplace.InplaceableOp(inplace, 0, extra_check=t2r.is_accumulation),
                "no in-place entry: every chunk of an accumulation allocates a new buffer",
                PR_REINPLACE,
            )
        ]
        if inplace not in lowerings:
            patches.append(
                Patch(
                    f"{name}.lowering",
                    INDUCTOR,
                    DictEntry(lowerings, inplace, "torch._inductor.lowering.lowerings"),
                    t2l.as_registered_lowering(inplace, lower),
                    "the in-place op runs as an extern call of eager's kernel",
                    PR_REINPLACE,
                )
            )
        decisions.append(
            Decision(
                name,
                INDUCTOR,
                True,
                "accumulation chains (FLCE's addmm(..., out=grad_weight)) would allocate a "
                "parameter-sized buffer per chunk; run them in place like eager",
                PR_REINPLACE,
                patches,
            )
        )
    return decisions


def aten_op(name: str, overload: str):
    return getattr(getattr(torch.ops.aten, name), overload)


def _plan_caches_off() -> Decision:
    """Without cache_key_tag, the only way to keep artifacts apart is not to share them."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    patches = [
        Patch(
            f"cache.off.{owner_name}.{attr}",
            "cache",
            ConfigValue(owner, attr, owner_name),
            False,
            "no cache_key_tag on this torch",
            PR_CACHE,
        )
        for owner, owner_name, attr in (
            (inductor_config, "torch._inductor.config", "fx_graph_cache"),
            (functorch_config, "torch._functorch.config", "enable_autograd_cache"),
        )
        if hasattr(owner, attr)
    ]
    return Decision(
        "cache.off",
        "cache",
        True,
        "torch.compiler.config.cache_key_tag is missing: the FX graph and AOTAutograd "
        "caches are turned off while the fix is installed",
        PR_CACHE,
        patches,
    )


def _plan_cache_key(package_version: str, decisions: list[Decision]) -> Decision:
    name = "cache.key_tag"
    if not features.cache_key_tag_supported():
        return _plan_caches_off()
    import torch.compiler.config as cfg

    applied = sorted(d.name for d in decisions if d.needed)
    digest = hashlib.sha1("\n".join(applied).encode()).hexdigest()[:8]
    tag = f";inductor_addmm_fix={package_version}+{digest}"
    # 2.13+: config assignments are per thread; tag the value every thread sees.
    kind = TagInConfigDefault if features.config_is_per_thread(cfg, "cache_key_tag") else TagInString
    slot = kind(cfg, "cache_key_tag", "torch.compiler.config", tag=tag)
    return Decision(
        name,
        "cache",
        True,
        "FX graph and AOTAutograd caches do not key on the lowering tables: "
        "keep artifacts compiled with and without the fix apart",
        PR_CACHE,
        [
            Patch(
                name,
                "cache",
                slot,
                lambda old, tag=tag: old + tag,
                "cache keys",
                PR_CACHE,
                derive=True,
            )
        ],
    )
