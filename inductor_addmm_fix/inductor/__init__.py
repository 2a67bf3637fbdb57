"""Patches of Inductor: decompositions and lowerings of the out_dtype overloads,
re-inplacing, views feeding as_strided, the cache-key tag, and post-grad passes."""
