"""Compatibility name: the numpy evaluator lives in :mod:`tensorir.te.evaluate`."""
from tensorir.te.evaluate import EvaluateError, count_flops, evaluate, stage_flops, topo_stages  # noqa: F401
