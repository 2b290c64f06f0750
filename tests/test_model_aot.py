"""A whole model ahead of time: library + header + weights, run from a process that imports
nothing of tensortune (ctypes and numpy only) and from a C program."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tests.graph_lower_ops  # noqa: F401  (registers op kinds main does not have yet)
from graph.interpret import run
from tests.test_model_runtime import RNG, resnet_block
from tuner.model_aot import export_model

CALLER = r"""
import ctypes, json, sys
import numpy as np
prefix, out = sys.argv[1], sys.argv[2]
spec = json.load(open(prefix + ".json"))
lib = ctypes.CDLL(prefix + ".so")
assert lib.model_init((prefix + ".weights").encode()) == 0
inputs = [np.load(prefix + "." + io["name"] + ".npy").astype(io["storage_dtype"]) for io in spec["inputs"]]
outputs = [np.zeros(io["storage_shape"], io["storage_dtype"]) for io in spec["outputs"]]
ins = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
outs = (ctypes.c_void_p * len(outputs))(*[a.ctypes.data for a in outputs])
assert lib.model_run(ins, outs) == 0
assert lib.model_run(ins, outs) == 0
lib.model_free()
np.savez(out, **{io["name"]: a for io, a in zip(spec["outputs"], outputs)})
bad = [m for m in sys.modules if m.split(".")[0] in ("tensorir", "graph", "tuner", "schedules", "logs", "llvmlite")]
sys.exit(3 if bad else 0)
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("aot")
    g = resnet_block()
    x = RNG.standard_normal(g.types["x"].shape).astype("float32")
    prefix = str(tmp / "resblock")
    out = export_model(g, prefix)
    np.save(prefix + ".x.npy", x)
    return g, x, prefix, out


def test_library_runs_in_a_process_without_tensortune(exported, tmp_path):
    g, x, prefix, out = exported
    assert out.files == [prefix + ".so", prefix + ".h", prefix + ".weights", prefix + ".json"]
    proc = subprocess.run([sys.executable, "-I", "-c", CALLER, prefix, str(tmp_path / "out.npz")],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    want = run(g, {"x": x})
    for v in g.outputs:
        np.testing.assert_allclose(got[v], want[v], rtol=1e-4, atol=1e-4)


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "resblock.h"
int main(int argc, char **argv) {
    static float x[1 * 8 * 10 * 10], y[1 * 5];
    FILE *f = fopen(argv[1], "rb"); fread(x, sizeof x, 1, f); fclose(f);
    if (model_init(argv[2]) != 0) return 10;
    const void *ins[] = {x}; void *outs[] = {y};
    if (model_run(ins, outs) != 0) return 11;
    for (int i = 0; i < 5; i++) printf("%.7g\n", y[i]);
    model_free();
    return 0;
}
"""


def test_c_program_links_the_library_and_header(exported, tmp_path):
    g, x, prefix, _ = exported
    folder = prefix.rsplit("/", 1)[0]
    (tmp_path / "main.c").write_text(C_MAIN)
    x.tofile(tmp_path / "x.bin")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), f"-I{folder}", prefix + ".so",
                    f"-Wl,-rpath,{folder}"], check=True, capture_output=True)
    proc = subprocess.run([str(tmp_path / "main"), str(tmp_path / "x.bin"), prefix + ".weights"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = np.array([float(v) for v in proc.stdout.split()], np.float32)
    np.testing.assert_allclose(got, run(g, {"x": x})[g.outputs[0]].reshape(-1), rtol=1e-4, atol=1e-4)
    spec = json.load(open(prefix + ".json"))
    assert spec["inputs"][0]["name"] == "x" and spec["kernels"] >= 4
