"""``tensortune run | graph | compile``: whole ONNX models.

    tensortune run model.onnx --input x=x.npy [--shape x=1x3x224x224] --output out.npz [--log L] [--threads T]
    tensortune graph model.onnx [--passes]
    tensortune compile model.onnx -o out/model [--log L] [--threads T]

Bad input (a missing or corrupt file, unsupported ops, a symbolic dimension not pinned, an
input of the wrong name, shape or dtype) is one line and exit status 2.
"""
from __future__ import annotations

import os
import sys
import time

from .errors import CLIError, require_logs

COMMANDS = ("run", "graph", "compile")


def add_parser(sub) -> None:
    """Register ``run``, ``graph`` and ``compile``."""
    r = sub.add_parser("run", help="run an ONNX model on .npy inputs, write its outputs to .npz",
                       description="Compile MODEL.onnx (tuned schedules from the logs, else the heuristic "
                       "start) and run it on the --input arrays; OUT.npz holds the outputs keyed by their "
                       "ONNX names.")
    r.add_argument("model", metavar="MODEL.onnx")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input (repeatable); an input with symbolic dimensions takes its array's shape")
    _shape_arg(r)
    r.add_argument("--output", required=True, metavar="OUT.npz")
    r.add_argument("--log", action="append", help="tuning log searched first (repeatable)")
    r.add_argument("--threads", type=int, help="kernel threads (default: all cores)")
    r.add_argument("--profile", action="store_true", help="also print the time of each fused group (slowest first)")
    g = sub.add_parser("graph", help="print an ONNX model's graph, passes and fused groups",
                       description="Print the graph after import (and after each pass with --passes), then "
                       "the fused groups with their workloads.")
    g.add_argument("model", metavar="MODEL.onnx")
    _shape_arg(g)
    g.add_argument("--passes", action="store_true", help="print the graph after each pass")
    c = sub.add_parser("compile", help="compile an ONNX model ahead of time: library, header, weights",
                       description="Write OUT.so (every kernel and model_init/model_run/model_free), OUT.h, "
                       "OUT.weights and OUT.json (inputs and outputs); OUT.so needs only libc and libm.")
    c.add_argument("model", metavar="MODEL.onnx")
    c.add_argument("-o", "--output", required=True, metavar="OUT")
    _shape_arg(c)
    c.add_argument("--log", action="append", help="tuning log searched first (repeatable)")
    c.add_argument("--threads", type=int, default=0, help="threads of the library's kernels (0: OMP_NUM_THREADS if set, else all cores)")


def _shape_arg(p) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="pin an input's shape, e.g. x=1x3x224x224 (repeatable)")


def parse_shapes(items) -> dict:
    """``["x=1x3x224x224"]`` -> ``{"x": (1, 3, 224, 224)}`` (CLIError naming a bad item)."""
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.replace(",", "x").split("x") if d != "")
            if any(d < 0 for d in shape):
                raise ValueError
        except ValueError:
            raise CLIError(f"--shape {item!r}: expected NAME=DIMS, e.g. x=1x3x224x224") from None
        shapes[name] = shape
    return shapes


def load_graph(path: str, shapes: dict):
    """The model's graph; every import problem is a CLIError of one line."""
    from graph.ir import GraphError
    from tuner.model_api import load
    try:
        return load(path, shapes or None)
    except GraphError as err:
        raise CLIError(_line(err)) from None
    except Exception as err:  # noqa: BLE001 - a parse failure of the user's file (protobuf, onnx checker...)
        raise CLIError(f"cannot read model {path}: {_line(err)}") from None


def _symbolic_inputs(path: str) -> list:
    """Names of the model's inputs with a dimension that is not a fixed size (none when the file
    does not parse: loading it reports that)."""
    try:
        import onnx
        model = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - load_graph says what is wrong with the file
        return []
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights and any(
        not d.HasField("dim_value") or d.dim_value <= 0 for d in i.type.tensor_type.shape.dim)]


def _line(err) -> str:
    from .text import one_line
    return one_line(err)


def read_inputs(items) -> dict:
    import numpy as np
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise CLIError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise CLIError(f"--input {name} is given twice")
        try:
            with open(path, "rb") as f:
                head = f.read(6)
            if head != b"\x93NUMPY" and not head.startswith(b"PK"):      # neither .npy nor .npz
                raise CLIError(f"--input {name}: {path} is not a .npy array (no .npy header; save it with numpy.save)")
            feeds[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise CLIError(f"--input {name}: file {path} not found") from None
        except CLIError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever np.load makes of a file that is not .npy (EOFError...)
            raise CLIError(f"--input {name}: {path} is not a .npy array ({_line(err) or type(err).__name__})") from None
        if not isinstance(feeds[name], np.ndarray):
            raise CLIError(f"--input {name}: {path} holds several arrays (.npz); give one .npy per input")
    return feeds


def _compile(graph, log, threads):
    from graph.ir import GraphError
    from tuner.model_compile import compile_graph
    if threads is not None and threads < 1:
        raise CLIError(f"--threads must be >= 1, got {threads}")
    try:
        return compile_graph(graph, log=log, threads=threads)
    except GraphError as err:
        raise CLIError(_line(err)) from None


def cmd_run(args) -> int:
    import numpy as np
    from graph.runtime import ModelInputError
    out = args.output
    if not out.endswith(".npz"):
        raise CLIError(f"--output {out!r} must end in .npz")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise CLIError(f"--output {out}: folder {folder} does not exist")
    require_logs(args.log)
    feeds = read_inputs(args.input)
    t0 = time.perf_counter()
    shapes = parse_shapes(args.shape)
    for name in _symbolic_inputs(args.model):
        if name in feeds and name not in shapes:      # a dynamic input takes the shape of its array
            shapes[name] = tuple(feeds[name].shape)
    graph = load_graph(args.model, shapes)
    model = _compile(graph, args.log, args.threads)
    t1 = time.perf_counter()
    try:
        outputs = model.run(feeds)
    except ModelInputError as err:
        raise CLIError(str(err)) from None
    t2 = time.perf_counter()
    np.savez(out, **outputs)
    info = model.info
    print(f"{graph.name}: {len(graph.nodes)} nodes -> {info['groups']} fused groups, {info['distinct_kernels']} "
          f"kernels ({', '.join(f'{n} {m}' for m, n in info['schedules'].items())}); compiled in {t1 - t0:.1f} s, "
          f"ran in {(t2 - t1) * 1e3:.1f} ms{'; ' + info['serial'] if info.get('serial') else ''}", file=sys.stderr)
    print(f"wrote {out}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in outputs.items())}")
    if args.profile:
        print(profile_text(model, feeds))
    return 0


def profile_text(model, feeds, top: int = 15) -> str:
    """The slowest steps of ``model`` on ``feeds``: ms per call, share, the group's ops."""
    from tensorir.te.evaluate import count_flops
    plan = model.info.get("plan")
    groups = {g.name: (g, lw) for g, lw in zip(plan.groups, plan.lowered)} if plan is not None else {}
    prof = sorted(model.profile(feeds), key=lambda p: -p["seconds"])
    total = sum(p["seconds"] for p in prof) or 1.0
    lines = [f"profile: {len(prof)} steps, {total * 1e3:.2f} ms in kernels, each timed where it runs in the model "
             f"(GB/s: every buffer a step reads or writes, once)"]
    for p in prof[:top]:
        g, lw = groups.get(p["label"], (None, None))
        what = "+".join(g.ops) if g is not None else p["label"]
        step = model.steps[p["step"]]
        nbytes = sum(model.buffers[b].nbytes for b in set(step.args) - model.unread)
        rate = f"{nbytes / p['seconds'] / 1e9:6.1f} GB/s"
        if lw is not None:
            rate += f" {count_flops(lw.tensors) / p['seconds'] / 1e9:7.1f} GFLOP/s"
        lines.append(f"  {p['seconds'] * 1e3:9.3f} ms {p['seconds'] / total:6.1%} {rate}  step {p['step']:<3} {what} "
                     f"({p['label']})")
    return "\n".join(lines)


def workload_text(lowered) -> str:
    """A few lines describing a group's workload: key, parameters, stages."""
    from tensorir.te.evaluate import topo_stages
    params = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in lowered.tensors)
    stages = [t for t in topo_stages(lowered.tensors) if not t.is_placeholder]
    text = ", ".join(f"{t.name}{'(reduce)' if t.op.reduce_axes else ''}" for t in stages)
    return f"workload {lowered.key} [{params}]\n  stages: {text}"


def cmd_graph(args) -> int:
    from graph.fusion import format_groups
    from graph.ir import GraphError
    from tuner.model_compile import plan_graph, run_passes
    graph = load_graph(args.model, parse_shapes(args.shape))
    print(f"# after import\n{graph}")
    if args.passes:
        def show(name, g):
            print(f"\n# after {name}\n{g}")
        try:
            graph = run_passes(graph, trace=show)
        except GraphError as err:
            raise CLIError(_line(err)) from None
    try:
        plan = plan_graph(graph, passes=False) if args.passes else plan_graph(graph)
    except GraphError as err:
        raise CLIError(_line(err)) from None
    texts = {g.name: workload_text(lw) for g, lw in zip(plan.groups, plan.lowered)}
    distinct = len({lw.key for lw in plan.lowered})
    print(f"\n# fused groups ({distinct} distinct workloads)\n{format_groups(plan.graph, plan.groups, texts)}")
    return 0


def cmd_compile(args) -> int:
    from tuner.model_aot import AotError, export_model
    require_logs(args.log)
    graph = load_graph(args.model, parse_shapes(args.shape))
    if args.threads < 0:
        raise CLIError(f"--threads must be >= 0, got {args.threads}")
    from graph.ir import GraphError
    try:
        out = export_model(graph, args.output, log=args.log, threads=args.threads)
    except (AotError, GraphError) as err:
        raise CLIError(_line(err)) from None
    print(f"wrote {', '.join(out.files)}")
    print(out.summary)
    return 0


def run(args) -> int:
    """Dispatch ``run``, ``graph`` or ``compile``."""
    return {"run": cmd_run, "graph": cmd_graph, "compile": cmd_compile}[args.command](args)
