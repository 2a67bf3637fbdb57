"""Patches of Dynamo: what stays specialized from one frame's compile to the next, and
how the strides of a static-shaped tensor are answered."""
