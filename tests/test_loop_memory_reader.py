"""``benchmarks/loop_memory.py`` reads the peak of the buffers an Inductor wrapper holds
at once from its code: allocations, reuses and frees."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from loop_memory import wrapper_peak  # noqa: E402  (benchmarks/ on sys.path)

MIB = 2**20


def wrapper(*lines: str) -> str:
    return "\n".join(f"        {line}" for line in lines)


def test_the_peak_is_the_most_bytes_held_at_once():
    code = wrapper(
        "buf0 = empty_strided_cuda((256, 1024), (1024, 1), torch.float32)",  # 1 MiB
        "buf1 = empty_strided_cuda((512, 1024), (1024, 1), torch.bfloat16)",  # 1 MiB
        "del buf0",
        "buf2 = empty_strided_cuda((256, 1024), (1024, 1), torch.float32)",
        "del buf1",
        "del buf2",
    )
    peak, kinds = wrapper_peak(code)
    assert peak == 2 * MIB
    assert kinds == {"(256, 1024) float32": 1, "(512, 1024) bfloat16": 1}


def test_a_reused_buffer_keeps_its_bytes_until_the_new_name_is_freed():
    code = wrapper(
        "buf0 = empty_strided_cpu((1024, 256), (256, 1), torch.float32)",  # 1 MiB
        "buf3 = buf0; del buf0  # reuse",
        "buf4 = empty_strided_cpu((1024, 256), (256, 1), torch.float32)",
        "del buf3",
        "buf5 = empty_strided_cpu((1024, 256), (256, 1), torch.float32)",
    )
    assert wrapper_peak(code)[0] == 2 * MIB


def test_lines_that_allocate_nothing_change_nothing():
    code = wrapper("extern_kernels.mm(arg0_1, arg1_1, out=buf9)", "del async_compile", "return (buf9, )")
    assert wrapper_peak(code) == (0, {})
