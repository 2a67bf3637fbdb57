"""Keep compiled artifacts made with and without the package apart.

Neither the FX graph cache nor the AOTAutograd cache keys on Inductor's lowering or
decomposition tables, so an artifact compiled with the package's patches could be
served to a process without them, and the reverse.  While any feature with an Inductor
part is applied, ``;inductor_addmm_fix=<version>+<hash>`` is appended to
``torch.compiler.config.cache_key_tag`` (which both keys hash); the hash covers the
applied features and their patches, so that two feature sets never share artifacts.
On a torch without that option both caches are turned off instead.  This is
machinery, applied for the features that need it, not a feature of its own.
"""

from __future__ import annotations

import hashlib

from ..patching.declare import Decision, needed
from ..patching.probes import config_is_per_thread
from ..patching.config_options import AppendTag, ConfigOption, SetValue
from ..patching.registry import Patch

RETIRED_BY = "when the compile caches key on the lowering tables (no upstream change yet)"


def cache_key_tag_supported() -> bool:
    """Whether ``torch.compiler.config.cache_key_tag`` exists (2.8-2.15 have it)."""
    try:
        import torch.compiler.config as cfg

        return isinstance(getattr(cfg, "cache_key_tag", None), str)
    except Exception:
        return False


def tag_for(applied: tuple[str, ...], package_version: str) -> str:
    """``;inductor_addmm_fix=<version>+<hash of what is applied>``."""
    digest = hashlib.sha1("\n".join(sorted(applied)).encode()).hexdigest()[:8]
    return f";inductor_addmm_fix={package_version}+{digest}"


def plan(applied: tuple[str, ...], package_version: str) -> list[Decision]:
    """The tag for ``applied`` (the applied features, then their patches' names)."""
    if not cache_key_tag_supported():
        return [_caches_off()]
    import torch.compiler.config as cfg

    name = "cache.key_tag"
    per_thread = config_is_per_thread(cfg, "cache_key_tag")
    slot = ConfigOption(cfg, "cache_key_tag", "torch.compiler.config", AppendTag(tag_for(applied, package_version)), per_thread)
    reason = (
        "FX graph and AOTAutograd caches do not key on the lowering tables: "
        "keep artifacts compiled with and without the package apart"
    )
    return [needed(name, reason, [Patch(name, slot)], probe=cache_key_tag_supported, obsolete_when=RETIRED_BY)]


def _caches_off() -> Decision:
    """Without cache_key_tag, the only way to keep artifacts apart is not to share them."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    patches = [
        Patch(
            f"cache.off.{owner_name}.{attr}",
            ConfigOption(owner, attr, owner_name, SetValue(False), config_is_per_thread(owner, attr)),
        )
        for owner, owner_name, attr in (
            (inductor_config, "torch._inductor.config", "fx_graph_cache"),
            (functorch_config, "torch._functorch.config", "enable_autograd_cache"),
        )
        if hasattr(owner, attr)
    ]
    reason = (
        "torch.compiler.config.cache_key_tag is missing: the FX graph and AOTAutograd "
        "caches are turned off while the package is installed"
    )
    return needed("cache.off", reason, patches, probe=cache_key_tag_supported, obsolete_when=RETIRED_BY)
