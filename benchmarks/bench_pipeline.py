"""Fast vs default LLVM pipeline: compile time and kernel speed, side by side.

For every record in the shipped pre-tuned logs (the best tuned schedules of
the built-in workloads) and the hand schedules of bench_core.py, the same
lowered function is compiled with ``OptConfig(pipeline="default")`` (LLVM -O3)
and with the default ``OptConfig()`` (``"auto"``: the fast pipeline for
vectorized kernels), checked against numpy, and timed alternately.

    python benchmarks/bench_pipeline.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_core import conv2d_schedule, matmul_schedule  # noqa: E402
from logs.paths import pretuned_dir  # noqa: E402
from schedules import Schedule  # noqa: E402
from tensorir.runtime import llvm as runtime  # noqa: E402
from tensorir.target import Target  # noqa: E402
from tensorir.runtime import compile_func  # noqa: E402
from tensorir.ops.registry import get_workload  # noqa: E402
from tuner.compare import side_by_side  # noqa: E402


def cases():
    lanes = Target.host().lanes32
    yield "matmul 1024 (bench_core)", matmul_schedule(1024, 1024, 1024, lanes), None
    yield "conv2d resnet (bench_core)", conv2d_schedule(1, 64, 56, 56, 64, 3, 3, 1, lanes), None
    seen = set()
    for path in sorted(pretuned_dir().glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("error_kind"):
                continue
            key = (rec["workload_name"], json.dumps(rec["workload_params"], sort_keys=True))
            if key in seen:
                continue          # the best record of each workload (records are sorted best first)
            seen.add(key)
            wl = get_workload(rec["workload_name"])
            tensors = wl.make(**rec["workload_params"])
            yield wl.label(**rec["workload_params"]), Schedule.from_json(tensors, rec["trace"]), \
                (wl, rec["workload_params"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print("| kernel | compile ms default | compile ms fast | run default / run fast |")
    print("|---|---|---|---|")
    for label, sched, wl in cases():
        func = sched.lower()
        kernels, ctimes = {}, {}
        for name, cfg in (("default", runtime.OptConfig(pipeline="default")), ("fast", runtime.OptConfig())):
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                kernels[name] = compile_func(func, cfg)
                ts.append(time.perf_counter() - t0)
            ctimes[name] = 1e3 * statistics.median(ts)
        arrays = [np.random.default_rng(0).standard_normal(b.shape).astype(b.dtype) for b in func.params]
        n_in = len(func.params) - 1
        outs = {}
        for name, k in kernels.items():
            k(*arrays)
            outs[name] = arrays[-1].copy()
        np.testing.assert_allclose(outs["fast"], outs["default"], rtol=2e-4, atol=2e-4)
        if wl is not None:
            ref = wl[0].reference(arrays[:n_in], **wl[1])[-1]
            np.testing.assert_allclose(outs["fast"], ref, rtol=2e-3, atol=2e-3)
        res = side_by_side({n: (lambda k=k: k(*arrays)) for n, k in kernels.items()},
                           rounds=args.rounds, min_repeat_ms=50)
        ratio = res["default"]["median"] / res["fast"]["median"]
        print(f"| {label} | {ctimes['default']:.1f} | {ctimes['fast']:.1f} | {ratio:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
