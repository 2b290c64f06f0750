"""The machine a tuning run measures on, as its records, studies and cost model name it.

:func:`host_target` is the only place the tuner reads the host (through
:meth:`tensorir.target.Target.host`).
"""
from __future__ import annotations

from tensorir.target import Target


def host_target(threads: int | None = None) -> dict:
    """``{"kind", "cpu", "features", "threads"}`` of this machine, as :class:`logs.TuningRecord` stores it.

    ``threads`` is the kernels' thread count; None means every core this process may run on.
    """
    return Target.host(threads or None).record()
