"""The machine a tuning run measures on, as its records, studies and cost model name it.

:func:`host_target` is the only place the tuner reads the host's description
(:func:`tensorir.runtime.host_target`), so a typed target replaces the dict here alone.
"""
from __future__ import annotations


def host_target(threads: int | None = None) -> dict:
    """``{"kind", "cpu", "features", "threads"}`` of this machine, as :class:`logs.TuningRecord` stores it.

    ``threads`` is the kernels' thread count; None means every core this process may run on.
    """
    from tensorir.runtime import host_target as describe_host
    host = describe_host()
    return {"kind": "llvm", "cpu": host["cpu"], "features": host.get("features", ""),
            "threads": threads or host["num_cores"]}
