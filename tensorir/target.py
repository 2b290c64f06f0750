"""The CPU a kernel is compiled and tuned for.

:meth:`Target.host` is the one place that reads the host CPU; everything else
(the search space, lowering, code generation, the tuner, log lookup) receives a
``Target`` and reads its fields, so a kernel can be compiled and its records
matched for a CPU other than the one the process runs on.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

import llvmlite.binding as llvm

_HOST: dict = {}
_LOCK = threading.Lock()


def vector_bits_of(features: str) -> int:
    """The widest SIMD register width implied by an LLVM feature string (512, 256 or 128)."""
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return 512
    if "+avx" in flags or "+avx2" in flags:
        return 256
    return 128


@dataclass(frozen=True, slots=True)
class Target:
    """An LLVM CPU target.

    Attributes
    ----------
    cpu : str
        LLVM CPU name (``"znver3"``, ``"rocketlake"``...).
    features : str
        LLVM feature string (``"+avx2,+fma,..."``).
    vector_bits : int
        Widest SIMD register in bits (512, 256 or 128).
    cores : int
        CPUs the kernels may use.
    threads : int
        Threads parallel loops run on (default: ``cores``).
    """
    cpu: str
    features: str
    vector_bits: int
    cores: int
    threads: int

    @classmethod
    def host(cls, threads: int | None = None) -> "Target":
        """The CPU this process runs on, with ``threads`` threads (default: every usable core)."""
        with _LOCK:
            if "host" not in _HOST:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                features = llvm.get_host_cpu_features().flatten()
                cores = len(os.sched_getaffinity(0))
                _HOST["host"] = cls(llvm.get_host_cpu_name(), features, vector_bits_of(features),
                                    cores, cores)
        host = _HOST["host"]
        return host if threads is None else host.with_threads(threads)

    def with_threads(self, threads: int) -> "Target":
        return replace(self, threads=int(threads))

    @property
    def lanes32(self) -> int:
        """32-bit lanes in one native vector register."""
        return self.vector_bits // 32

    def record(self) -> dict:
        """The target as tuning logs store it (format version 1 of :mod:`logs.record`)."""
        return {"kind": "llvm", "cpu": self.cpu, "features": self.features, "threads": self.threads}
