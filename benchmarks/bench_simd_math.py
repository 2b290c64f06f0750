"""The SIMD math of ``tensorir/codegen/simd_math.py`` (exp, tanh, log) against another revision's,
side by side in one process.

    python benchmarks/bench_simd_math.py --against REV [--threads 1,2] [--rounds 9] [--n 153600]
                                         [--models se_block,bert_layer] [--out FILE]

Kernels: ``exp(x)``, Swish ``x * sigmoid(x)``, ``tanh(x)`` and ``log(|x| + 1e-3)`` over N float32
values (the generated space's start, 8-lane and 32-lane vectors), then every step of the whole models
(``tests/onnx_models.py``) whose assembly differs between the two, and the models' ``run``.  Each
is built twice: with REV's ``simd_math`` module (its source read with ``git show``) and with the
working tree's, the compile cache cleared in between.  Timed alternately with a pause at every
switch (``tuner.compare.side_by_side``), medians; the two builds' outputs are compared too.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import types
import warnings

import numpy as np

import tensorir.codegen.function as function_module
import tensorir.codegen.simd_math as current
from schedules.decisions import FixedDecisions
from schedules.space import GeneratedSpace
from tensorir import te
from tensorir.runtime import build, clear_cache
from tuner.compare import side_by_side
from tuner.target import host_target

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
NAMES = ("vector_exp", "vector_tanh", "vector_log")
KERNELS = {"exp": lambda v: te.exp(v), "swish": lambda v: v * te.sigmoid(v), "tanh": lambda v: te.tanh(v),
           "log": lambda v: te.log(te.abs(v) + 1e-3)}


def module_at(rev: str) -> types.ModuleType:
    """``tensorir.codegen.simd_math`` as it was at git revision ``rev``."""
    root = os.path.join(HERE, "..")
    src = subprocess.run(["git", "show", f"{rev}:tensorir/codegen/simd_math.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"simd_math_at_{rev}")
    exec(compile(src, f"{rev}:simd_math.py", "exec"), mod.__dict__)
    return mod


@contextlib.contextmanager
def math_of(mod: types.ModuleType):
    """Code generation calls ``mod``'s functions while inside (``function.py`` imports them by name)."""
    saved = {n: getattr(function_module, n) for n in NAMES}
    clear_cache()
    try:
        for n in NAMES:
            setattr(function_module, n, getattr(mod, n))
        yield
    finally:
        for n, f in saved.items():
            setattr(function_module, n, f)
        clear_cache()


def unary_kernel(name: str, n: int, lanes: int, threads: int, xs):
    x = te.placeholder((n,), "float32", "x")
    y = te.compute((n,), lambda i: KERNELS[name](x[i]), "y")
    space = GeneratedSpace([x, y])
    dec = {**space.default_decisions(), "y.vector": lanes}
    kernel = build(space.apply(FixedDecisions(dec)).lower())
    kernel.threads = threads
    out = np.empty_like(xs)
    kernel(xs, out)
    return kernel.bind(xs, out), out


def compiled_model(name: str, threads: int):
    import onnx_models
    from tuner.model_api import compile_model, load
    from tuner.model_timing import random_feeds
    graph = load(getattr(onnx_models, name)())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = compile_model(graph, threads=threads)
    feeds = random_feeds(graph)
    outs = model.run(feeds)
    return model, feeds, outs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="git revision whose simd_math is the baseline")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=153600)
    ap.add_argument("--models", default="se_block,bert_layer")
    ap.add_argument("--out", help="also write the output to this file")
    args = ap.parse_args(argv)
    log = open(args.out, "a") if args.out else None

    def say(text: str) -> None:
        print(text, flush=True)
        if log:
            print(text, file=log, flush=True)

    old = module_at(args.against)
    say(f"host {host_target()['cpu']}; simd_math of {args.against} ('old') against the working tree ('new')")
    xs = (np.random.default_rng(0).standard_normal(args.n) * 3).astype(np.float32)
    for threads in (int(t) for t in args.threads.split(",")):
        fns, outs = {}, {}
        for tag, mod in (("old", old), ("new", current)):
            with math_of(mod):
                for name in KERNELS:
                    for lanes in (8, 32):
                        fns[(name, lanes, tag)], outs[(name, lanes, tag)] = unary_kernel(name, args.n, lanes, threads, xs)
                for m in filter(None, args.models.split(",")):
                    model, feeds, res = compiled_model(m, threads)
                    outs[(m, tag)] = (model, feeds, res)
        for m in filter(None, args.models.split(",")):
            (mo, fo, ro), (mn, fnw, rn) = outs[(m, "old")], outs[(m, "new")]
            diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(ro.values(), rn.values()))
            say(f"{m}, {threads} thread(s): largest output difference old/new {diff:.2e}")
            for i, (so, sn) in enumerate(zip(mo.steps, mn.steps)):
                if so.kernel.asm() != sn.kernel.asm():
                    fns[(f"{m} step {i} {so.label}", 0, "old")] = mo._bound[i]
                    fns[(f"{m} step {i} {so.label}", 0, "new")] = mn._bound[i]
            fns[(f"{m} run", 0, "old")] = lambda mo=mo, fo=fo: mo.run(fo)
            fns[(f"{m} run", 0, "new")] = lambda mn=mn, fnw=fnw: mn.run(fnw)
        for name in KERNELS:
            for lanes in (8, 32):
                a, b = outs[(name, lanes, "old")], outs[(name, lanes, "new")]
                ok = np.isfinite(a) & (a != 0)
                rel = float(np.max(np.abs(a[ok] - b[ok]) / np.abs(a[ok]))) if ok.any() else 0.0
                say(f"{name} {lanes} lanes: largest relative difference old/new {rel:.1e}")
        res = side_by_side(fns, rounds=args.rounds)
        say(f"\n{threads} thread(s), median ms of {args.rounds} rounds; ratio old/new (> 1: new faster)")
        for key in [k for k in fns if k[2] == "old"]:
            o, n = res[key]["median"], res[(key[0], key[1], "new")]["median"]
            label = key[0] + (f" {args.n} values, {key[1]} lanes" if key[1] else "")
            say(f"  {label:<52} old {o * 1e3:8.3f}  new {n * 1e3:8.3f}  {o / n:5.2f}x")


if __name__ == "__main__":
    main()
