"""Analyses of loop-IR expressions: the affine form of an index (:mod:`.affine`) and integer
bounds from variable ranges (:mod:`.bounds`), the values over given variable values (:mod:`.values`)."""
from tensorir.tir.analysis.affine import Affine, affine, coefficient, mentions  # noqa: F401
from tensorir.tir.analysis.bounds import Ranges, int_range, linear_range  # noqa: F401
