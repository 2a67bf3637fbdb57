"""Patches of how user Triton kernels are compiled (``torch._higher_order_ops.triton_kernel_wrap``
and AOTAutograd's handling of their arguments): the copies of the views they write, and
the floats they are passed."""
