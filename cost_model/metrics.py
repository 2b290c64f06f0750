"""Ranking quality of cost-model predictions (what the tuner cares about: order, not scale)."""
from __future__ import annotations

import numpy as np

_CHUNK = 2048


def pairwise_accuracy(pred, true, groups=None) -> float:
    """Fraction of pairs with different true values that the prediction orders correctly.

    Parameters
    ----------
    pred : array_like of shape (n,)
        Predicted scores (higher = faster).
    true : array_like of shape (n,)
        True values, e.g. throughputs (higher = faster).
    groups : array_like of shape (n,), optional
        Workload ids; when given only pairs inside the same group are compared
        (scores of different workloads are not comparable).

    Returns
    -------
    float
        In ``[0, 1]``; a pair whose predictions tie counts one half.  ``nan``
        when no pair has different true values.

    Examples
    --------
    >>> pairwise_accuracy([1, 2, 3], [10, 20, 30])
    1.0
    >>> pairwise_accuracy([3, 2, 1], [10, 20, 30])
    0.0
    """
    pred = np.asarray(pred, dtype=np.float64).ravel()
    true = np.asarray(true, dtype=np.float64).ravel()
    if pred.shape != true.shape:
        raise ValueError(f"pred and true must have the same length, got {pred.size} and {true.size}")
    if groups is None:
        members = [np.arange(pred.size)]
    else:
        groups = np.asarray(groups).ravel()
        if groups.shape != pred.shape:
            raise ValueError(f"groups must have length {pred.size}, got {groups.size}")
        members = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    score = total = 0.0
    for idx in members:
        p, t = pred[idx], true[idx]
        for start in range(0, p.size, _CHUNK):   # bounded memory for large n
            dt = np.sign(t[start:start + _CHUNK, None] - t[None, :])
            dp = np.sign(p[start:start + _CHUNK, None] - p[None, :])
            mask = dt != 0
            total += mask.sum()
            score += (dt == dp)[mask].sum() + 0.5 * (dp == 0)[mask].sum()
    return float(score / total) if total else float("nan")


def topk_recall(pred, true, k: int) -> float:
    """Fraction of the true top-``k`` found among the predicted top-``k``.

    Parameters
    ----------
    pred : array_like of shape (n,)
        Predicted scores (higher = faster).
    true : array_like of shape (n,)
        True values (higher = faster).
    k : int
        How many of the best to compare (clipped to ``n``).

    Returns
    -------
    float
        In ``[0, 1]``.  A predicted top-``k`` item counts as a hit when its true
        value is at least the ``k``-th largest true value, so ties at the
        boundary do not depend on index order.

    Examples
    --------
    >>> topk_recall([0.9, 0.1, 0.5, 0.3], [4, 1, 3, 2], k=2)
    1.0
    >>> topk_recall([0.1, 0.9, 0.5, 0.3], [4, 1, 3, 2], k=2)
    0.5
    """
    pred = np.asarray(pred, dtype=np.float64).ravel()
    true = np.asarray(true, dtype=np.float64).ravel()
    if pred.shape != true.shape:
        raise ValueError(f"pred and true must have the same length, got {pred.size} and {true.size}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, pred.size)
    if k == 0:
        return float("nan")
    threshold = np.sort(true)[::-1][k - 1]
    chosen = np.argsort(-pred, kind="stable")[:k]
    return float(min(int((true[chosen] >= threshold).sum()), k) / k)
