"""Winograd F(2x2, 3x3) against F(4x4, 3x3) on the same convolutions, side by side in one process.

    python benchmarks/bench_winograd_tiles.py [--shapes 64x64x56,128x128x28,...] [--threads 1,2]
                                              [--block 16] [--rounds 9] [--out FILE]

Each shape ``CxKxH`` (a square H x H plane, 3x3 window, stride 1, padding 1) is built as
``conv2d_winograd_nchwc`` with ``tile=2`` and ``tile=4``, each with its generated space's heuristic start
(no search), checked against the float64 matrix-form reference, and timed alternately
(:func:`tuner.compare.side_by_side`: rounds in alternating order, a pause at every switch); the ratio is
the median of per-round ratios (above 1: F(4x4) is faster). Blocks of ``--block`` channels (16, as the
graph level's blocked layout; 8 where 16 does not divide the channels). Why F(4x4, 3x3) is the default
where it is: docs/decisions/046-winograd-f4x4.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from schedules.decisions import FixedDecisions  # noqa: E402
from schedules.space import GeneratedSpace  # noqa: E402
from tensorir.ops import winograd as W  # noqa: E402
from tensorir.ops.library import pack_nchwc  # noqa: E402
from tensorir.runtime import build, clear_cache  # noqa: E402
from tuner.compare import paired_speedup, side_by_side  # noqa: E402

SHAPES = "64x64x56,128x128x28,256x256x14,96x96x20,48x48x17,24x40x45,32x32x112,256x256x28"


def kernels(c: int, k: int, h: int, block: int, threads: int) -> dict:
    """``{tile: (call, relative error, compile seconds)}`` for both tiles."""
    cb = block if c % block == 0 else 8
    kb = block if k % block == 0 else 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    xb = pack_nchwc(x, cb)
    out = {}
    for m in W.TILES:
        tensors = W.conv2d_winograd_nchwc(1, c, h, h, k, cb, kb, tile=m)
        space = GeneratedSpace(tensors)
        clear_cache()                 # a cold compile at every thread count
        t0 = time.perf_counter()
        kernel = build(space.apply(FixedDecisions(space.default_decisions())).lower())
        compile_s = time.perf_counter() - t0
        kernel.threads = threads
        u = W.winograd_weights(w, m)
        y = np.empty(tensors[-1].shape, np.float32)
        kernel(xb, u, y)
        ref = W.reference(xb.astype(np.float64), u.astype(np.float64), kb)
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        out[m] = (kernel.bind(xb, u, y), err, compile_s)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES, help="CxKxH, comma separated")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--block", type=int, default=16, help="channels per block")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", help="also write the output to FILE")
    args = p.parse_args(argv)
    import llvmlite.binding as llvm
    lines = [f"host {llvm.get_host_cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "| shape CxK@H | threads | F(2x2) ms | F(4x4) ms | F(4x4) speed-up (paired) | rel err F(2x2) / F(4x4) "
             "| compile s F(2x2) / F(4x4) |", "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for threads in (int(t) for t in args.threads.split(",")):
        for shape in args.shapes.split(","):
            c, k, h = (int(v) for v in shape.split("x"))
            ks = kernels(c, k, h, args.block, threads)
            res = side_by_side({f"F{m}": ks[m][0] for m in W.TILES}, rounds=args.rounds, min_repeat_ms=50)
            line = (f"| {c}-{k}@{h} | {threads} | {res['F2']['median'] * 1e3:.3f} | {res['F4']['median'] * 1e3:.3f} | "
                    f"{paired_speedup(res, 'F4', 'F2'):.2f}x | {ks[2][1]:.1e} / {ks[4][1]:.1e} | "
                    f"{ks[2][2]:.1f} / {ks[4][2]:.1f} |")
            print(line, flush=True)
            lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
