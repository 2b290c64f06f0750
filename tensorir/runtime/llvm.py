"""LLVM process state: the target machine, the optimizer and object/assembly emission.

Everything here is created once per process and reused by every build: the
target machine, the pass builder and the ORC JIT.  LLVM's global context is not
thread-safe, so every call into LLVM that builds, optimizes or links code holds
:data:`LLVM_LOCK`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

from tensorir.target import Target

LLVM_LOCK = threading.RLock()

@dataclass(frozen=True)
class OptConfig:
    """Which LLVM optimization pipeline a kernel gets.

    Attributes
    ----------
    pipeline : str
        ``"fast"``: a short function pipeline (SROA, DSE, InstCombine,
        SimplifyCFG) for code the schedule already vectorized and unrolled;
        code generation emits it in the shape LLVM's loop passes and GVN would
        have produced (hoisted pointer chains, i64 counters, register
        promotion of accumulator tiles, register tiles unrolled), so it runs
        about as fast as after ``-O3`` and compiles several times faster.
        (NewGVN, the only GVN llvmlite exposes, hits an assertion on some
        kernels and aborts the process: it is not used; docs/decisions/019-fast-llvm-pipeline.md.)  ``"default"``: LLVM's standard
        ``-O<speed_level>`` pipeline, which adds auto-vectorization for loops a
        schedule left scalar.  ``"auto"`` (the default): ``"fast"`` when the
        kernel has a vectorized loop, else ``"default"``.
    speed_level : int
        The ``-O`` level of the default pipeline, 0-3.
    loop_unrolling : bool
        Let LLVM unroll loops in the default pipeline.  Off by default:
        unrolling is a schedule decision (UNROLLED loops), and on tiled kernels
        LLVM's unrollers cost up to ~40% of the optimization time without
        making the code faster.
    loop_vectorization, slp_vectorization : bool
        LLVM's auto-vectorizers in the default pipeline.
    """
    pipeline: str = "auto"
    speed_level: int = 3
    loop_unrolling: bool = False
    loop_vectorization: bool = True
    slp_vectorization: bool = True

    def __post_init__(self):
        if self.pipeline not in ("auto", "fast", "default"):
            raise ValueError(f"OptConfig.pipeline must be 'auto', 'fast' or 'default', "
                             f"got {self.pipeline!r}")


FAST_PASSES = ("sroa", "dead_store_elimination", "instruction_combine", "simplify_cfg")


DEFAULT_OPT = OptConfig()


_state: dict = {}


def initialize() -> None:
    if not _state.get("initialized"):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _state["initialized"] = True


def target_machine() -> llvm.TargetMachine:
    """The process-wide host target machine (PIC, small code model, -O3)."""
    if "tm" not in _state:
        with LLVM_LOCK:
            host = Target.host()
            target = llvm.Target.from_triple(llvm.get_process_triple())
            # PIC so the same object works in the JIT and in a shared library.
            _state["tm"] = target.create_target_machine(
                cpu=host.cpu, features=host.features, opt=3,
                reloc="pic", codemodel="default")
    return _state["tm"]


def prepare_module(mod: llvm.ModuleRef) -> None:
    """Stamp ``mod`` with the host triple and data layout."""
    tm = target_machine()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)


def optimize(mod: llvm.ModuleRef, config: OptConfig = DEFAULT_OPT, vectorized: bool = False) -> str:
    """Optimize ``mod`` in place; returns the pipeline used (``"fast"`` or ``"default"``).

    ``vectorized`` tells whether the kernel has explicitly vectorized loops
    (how ``config.pipeline == "auto"`` chooses).
    """
    kind = config.pipeline
    if kind == "auto":
        kind = "fast" if vectorized else "default"
    key = ("passes", kind, config if kind == "default" else None)
    with LLVM_LOCK:
        if key not in _state:
            pto = llvm.create_pipeline_tuning_options(
                speed_level=config.speed_level if kind == "default" else 2)
            pto.loop_unrolling = config.loop_unrolling
            pto.loop_vectorization = config.loop_vectorization
            pto.slp_vectorization = config.slp_vectorization
            _state[key] = (pto, llvm.create_pass_builder(target_machine(), pto))
        pto, pb = _state[key]
        # A fresh pass manager per module: pipelines are cheap to build and
        # this keeps no analysis state alive between unrelated modules.
        if kind == "default":
            pb.getModulePassManager().run(mod, pb)
        else:
            mpm = llvm.create_new_module_pass_manager()
            for name in FAST_PASSES:
                getattr(mpm, f"add_{name}_pass")()
            mpm.run(mod, pb)
    return kind


def emit_object(mod: llvm.ModuleRef) -> bytes:
    """Compile ``mod`` to an ELF object file image."""
    with LLVM_LOCK:
        return target_machine().emit_object(mod)


def emit_assembly(mod: llvm.ModuleRef) -> str:
    """Compile ``mod`` to host assembly text."""
    with LLVM_LOCK:
        return target_machine().emit_assembly(mod)


# ---------------------------------------------------------------- libgomp
