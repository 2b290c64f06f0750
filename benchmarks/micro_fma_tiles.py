"""Register-tile micro-kernels on this host: which tile shapes feed the FMA units at their peak.

    python benchmarks/micro_fma_tiles.py [--tiles 7x1,6x2,4x2,3x4] [--memory-weights] [--steps 200000] [--rounds 15]

A tile ``QxM`` is Q broadcast inputs x M weight vectors: Q*M accumulators, each reduction step loading M weight
vectors and Q broadcast scalars from L1 (the operands cycle over 256 steps) and issuing Q*M vector FMAs, as the
inner loop of a blocked convolution or a matrix product does. Written in LLVM IR and compiled for the host CPU as
our kernels are, then timed single-threaded (the best of ``--rounds`` rounds that run every tile once); prints
GFLOP/s, the share of one core's FMA peak (``tuner.machine_peak``), and whether LLVM kept the tile in registers
(stack traffic in the loop = spills).
``--memory-weights`` loads each weight vector once per FMA (volatile, so LLVM folds it into the FMA as a memory
operand, as onnxruntime's MLAS kernels are written) instead of once per step into a register. Figures for a
decision note, not a test: the loop has no edges, packing or cache misses.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time

import numpy as np


def tile_ir(name: str, q: int, m: int, lanes: int, memory_weights: bool) -> str:
    vec = f"<{lanes} x float>"
    out = [f"define void @{name}(ptr noalias readonly %w, ptr noalias readonly %x, ptr noalias %y, i64 %n) {{",
           "entry:", "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    out += [f"  %a{j}_{k} = phi {vec} [zeroinitializer, %entry], [%f{j}_{k}, %loop]" for j in range(q) for k in range(m)]
    out.append("  %s = and i64 %i, 255")
    for k in range(m):
        out += [f"  %wo{k} = mul i64 %s, {lanes * m}", f"  %wi{k} = add i64 %wo{k}, {lanes * k}",
                f"  %wp{k} = getelementptr float, ptr %w, i64 %wi{k}"]
        if not memory_weights:
            out.append(f"  %wv{k} = load {vec}, ptr %wp{k}, align 4")
    for j in range(q):
        out += [f"  %xo{j} = mul i64 %s, {q}", f"  %xi{j} = add i64 %xo{j}, {j}",
                f"  %xp{j} = getelementptr float, ptr %x, i64 %xi{j}", f"  %xs{j} = load float, ptr %xp{j}, align 4",
                f"  %xv{j} = insertelement {vec} poison, float %xs{j}, i64 0",
                f"  %xb{j} = shufflevector {vec} %xv{j}, {vec} poison, <{lanes} x i32> zeroinitializer"]
        for k in range(m):
            w = f"%wv{k}"
            if memory_weights:
                out.append(f"  %wm{j}_{k} = load volatile {vec}, ptr %wp{k}, align 4")
                w = f"%wm{j}_{k}"
            out.append(f"  %f{j}_{k} = call {vec} @llvm.fma.v{lanes}f32({vec} {w}, {vec} %xb{j}, {vec} %a{j}_{k})")
    out += ["  %i1 = add i64 %i, 1", "  %c = icmp ult i64 %i1, %n", "  br i1 %c, label %loop, label %exit", "exit:"]
    for j in range(q):
        for k in range(m):
            out += [f"  %yp{j}_{k} = getelementptr float, ptr %y, i64 {lanes * (j * m + k)}",
                    f"  store {vec} %f{j}_{k}, ptr %yp{j}_{k}, align 4"]
    out += ["  ret void", "}"]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", default="7x1,12x1,4x2,6x2,7x2,3x4,4x3", help="QxM: broadcasts x weight vectors")
    ap.add_argument("--memory-weights", action="store_true")
    ap.add_argument("--steps", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=15, help="rounds over all tiles; the best time of each is kept")
    args = ap.parse_args(argv)
    import llvmlite.binding as llvm

    from tensorir.runtime.llvm import initialize
    from tuner.machine_peak import machine_peak
    from tuner.target import host_target
    initialize()
    cpu = host_target()["cpu"]

    def target_machine():     # one per use: the JIT engine takes ownership of its own
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
    lanes = 16 if "+avx512f" in llvm.get_host_cpu_features().flatten() else 8
    peak = machine_peak(cpu, 1)
    tiles = []
    for t in args.tiles.split(","):
        try:
            q, m = (int(v) for v in t.lower().split("x"))
        except ValueError:
            raise SystemExit(f"micro_fma_tiles: tile {t!r} is not QxM (e.g. 7x1)")
        tiles.append((q, m))
    print(f"host {cpu}; {lanes} lanes; weights {'as FMA memory operands' if args.memory_weights else 'in registers'}"
          + (f"; one core's FMA peak {peak.peak_gflops:.0f} GFLOP/s" if peak else ""), flush=True)
    vec = f"<{lanes} x float>"
    src = "\n".join([tile_ir(f"t{q}x{m}", q, m, lanes, args.memory_weights) for q, m in tiles]
                    + [f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})"])
    mod = llvm.parse_assembly(src)
    mod.verify()
    asm = target_machine().emit_assembly(mod)
    engine = llvm.create_mcjit_compiler(mod, target_machine())
    engine.finalize_object()
    w = np.ones(256 * lanes * 4 + 64, np.float32)
    x = np.ones(256 * 16 + 64, np.float32)
    y = np.zeros(64 * lanes, np.float32)
    funcs = [ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address(f"t{q}x{m}")) for q, m in tiles]
    best = [float("inf")] * len(tiles)
    for _ in range(args.rounds):        # every tile once per round: a slow spell of the host hits them all
        for i, f in enumerate(funcs):
            best[i] = min(best[i], _timed(f, w, x, y, args.steps))
    for (q, m), t in zip(tiles, best):
        gflops = 2 * lanes * q * m * args.steps / t / 1e9
        body = asm.split(f"t{q}x{m}:", 1)[1].split(".Lfunc_end", 1)[0]
        stack = sum("(%rsp)" in line for line in body.splitlines())
        share = f" ({100 * gflops / peak.peak_gflops:.0f}% of peak)" if peak else ""
        print(f"{q} x {m}: {q * m:2d} accumulators, {gflops:6.1f} GFLOP/s{share}, "
              f"{'spills (' + str(stack) + ' stack operands)' if stack else 'in registers'}", flush=True)
    return 0


def _timed(f, w, x, y, steps: int) -> float:
    t = time.perf_counter()
    f(w.ctypes.data, x.ctypes.data, y.ctypes.data, steps)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
