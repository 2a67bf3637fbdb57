"""Patches of torch core: the meta kernels and core decompositions of the out_dtype
overloads, and the preconditions they share with the Inductor layer."""
