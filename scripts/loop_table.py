#!/usr/bin/env python3
"""Render the JSON lines of tests/gpu/test_liger_training_loop.py (LOOP_RESULTS=path) as
the markdown table of docs/gpu-results.md.

    python scripts/loop_table.py loop.jsonl
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows.sort(key=lambda r: (r["config"], r["shapes"], r["reduction"], r["weights"], r["accum"], r.get("mode") or ""))
    print(
        "| config | shapes | reduction | class weights | accum | mode | graphs after each step "
        "| pairs merged | max abs diff loss / grad_x / grad_w | grad_w error vs float64, over eager's |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["max_abs_diff"]
        ratio = r.get("grad_w_error_over_eagers")
        print(
            f"| {r['config']} | {r['shapes']} | {r['reduction']} | {'yes' if r['weights'] else 'no'} | {r['accum']} | "
            f"{r.get('mode') or '-'} | {' '.join(map(str, r['graphs_per_step']))} | {r.get('pairs_merged', '-')} | "
            f"{d['loss']:.1e} / {d['grad_x']:.1e} / {d['grad_w']:.1e} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
