"""The machine a tuning run measures on, as its records, studies and cost model name it.

:func:`host_target` is the only place the tuner reads the host (through
:meth:`tensorir.target.Target.host`).
"""
from __future__ import annotations

from tensorir.target import Target, vector_bits_of


def host_target(threads: int | None = None) -> dict:
    """``{"kind", "cpu", "features", "threads"}`` of this machine, as :class:`logs.TuningRecord` stores it.

    ``threads`` is the kernels' thread count; None means every core this process may run on.
    """
    return Target.host(threads or None).record()


def compile_target(threads: int | None = None, cpu: str | None = None, features: str | None = None) -> Target:
    """The :class:`Target` to compile for: this machine, or the CPU ``cpu`` with LLVM ``features``.

    ``threads`` as for :func:`host_target`; a CPU given without features keeps the host's.
    """
    host = Target.host(threads or None)
    if cpu is None and features is None:
        return host
    features = features or host.features
    return Target(cpu or host.cpu, features, vector_bits_of(features), host.cores, host.threads)
