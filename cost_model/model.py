"""XGBoost ranking cost model trained on per-workload normalised throughput (after Ansor).

The tuner calls :meth:`CostModel.predict` on the features of many candidate
schedules, measures the best few, and feeds the results back with
:meth:`CostModel.update`.  Labels are throughputs divided by the best
throughput of the same workload, so workloads of different sizes share one
model; a ranking objective learns the order inside each workload (``qid``).
xgboost is imported only when a model is trained, loaded or used.
"""
from __future__ import annotations

import base64
import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, fields

import numpy as np

STATE_FORMAT_VERSION = 1
_OBJECTIVES = ("rank:pairwise", "rank:ndcg", "reg:squarederror")


@dataclass
class CostModelConfig:
    """Hyper-parameters and retraining policy of :class:`CostModel`.

    Attributes
    ----------
    objective : str
        ``"rank:ndcg"`` (default; LambdaMART on integer grades
        ``rint(ndcg_grades * normalised throughput)`` with linear gain),
        ``"rank:pairwise"`` or ``"reg:squarederror"`` (Ansor's regression on
        normalised throughput).  Measured on held-out synthetic matmul
        schedules (5 workloads, 100-300 training samples each, 5 splits):
        ndcg 0.90-0.94 pairwise accuracy and 0.46-0.91 top-10 recall, pairwise
        0.89-0.96 and 0.45-0.78, regression 0.90-0.97 and 0.50-0.93.  ndcg
        beat pairwise on top-10 recall in every setting (what the tuner acts
        on); regression matched or beat both on these smooth synthetic labels,
        so re-check the choice on real tuning logs.
    max_depth, eta, num_boost_round, min_child_weight, gamma, subsample, colsample_bytree, reg_lambda
        xgboost tree-booster parameters.  Ranking gradients have small
        hessians: with ``rank:ndcg`` keep ``min_child_weight`` well below 1 or
        the trees never split (at 1.0 every prediction came out equal).
    lambdarank_pair_method : str
        ``"mean"`` samples pairs across the whole list (good overall order);
        ``"topk"`` only pairs with the top ``lambdarank_num_pair_per_sample``
        candidates (better top-k recall, much worse order below it).
    lambdarank_num_pair_per_sample : int
        Pairs per sample (``"mean"``) or truncation level (``"topk"``); 32
        pairs beat 8 by 1-3 points of pairwise accuracy.
    lambdarank_normalization : bool
        xgboost's leaf normalisation by the lambda gradient; off trains faster
        and was no worse.
    ndcg_grades : int
        Highest relevance grade for ``rank:ndcg`` (1..31); the best candidate
        of a workload gets it, failed candidates get 0.
    nthread : int
        xgboost threads.  1 by default: training then never competes with a
        measurement, and on a busy 2-core machine 2 threads were 3-15x
        slower than 1 (OpenMP threads spinning against other processes).
    seed : int
        Seeds xgboost and the random scores of an untrained model.
    min_train_samples : int
        No training before this many samples are stored.
    retrain_min_new_samples : int
        Retrain after this many new samples since the last training ...
    retrain_growth : float
        ... or when the data grew by this fraction since the last training.
    max_train_samples : int
        Cap on samples used per training: the newest own measurements first,
        then the newest pretraining samples.
    """

    objective: str = "rank:ndcg"
    max_depth: int = 5
    eta: float = 0.2
    num_boost_round: int = 100
    min_child_weight: float = 0.1
    gamma: float = 0.0
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    reg_lambda: float = 1.0
    lambdarank_pair_method: str = "mean"
    lambdarank_num_pair_per_sample: int = 32
    lambdarank_normalization: bool = False
    ndcg_grades: int = 31
    nthread: int = 1
    seed: int = 0
    min_train_samples: int = 8
    retrain_min_new_samples: int = 64
    retrain_growth: float = 0.2
    max_train_samples: int = 20000

    def __post_init__(self):
        if self.objective not in _OBJECTIVES:
            raise ValueError(f"objective must be one of {_OBJECTIVES}, got {self.objective!r}")
        if not 1 <= self.ndcg_grades <= 31:
            raise ValueError(f"ndcg_grades must be in [1, 31], got {self.ndcg_grades}")

    def xgb_params(self) -> dict:
        """The parameter dict passed to ``xgboost.train``."""
        params = {
            "objective": self.objective, "max_depth": self.max_depth, "eta": self.eta,
            "min_child_weight": self.min_child_weight, "gamma": self.gamma, "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree, "lambda": self.reg_lambda, "nthread": self.nthread,
            "seed": self.seed, "tree_method": "hist", "verbosity": 0,
        }
        if self.objective.startswith("rank:"):
            params["lambdarank_pair_method"] = self.lambdarank_pair_method
            params["lambdarank_num_pair_per_sample"] = self.lambdarank_num_pair_per_sample
            params["lambdarank_normalization"] = self.lambdarank_normalization
        if self.objective == "rank:ndcg":
            params["ndcg_exp_gain"] = False   # linear gain: grades are proportional to throughput
        return params


def _encode(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "base64": base64.b64encode(a.tobytes()).decode("ascii")}


def _decode(d: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(d["base64"]), dtype=np.dtype(d["dtype"])).reshape(d["shape"]).copy()


def normalize_per_group(throughputs, groups) -> np.ndarray:
    """Divide each throughput by the best throughput of its group.

    Parameters
    ----------
    throughputs : array_like of shape (n,)
        Measured throughputs; non-finite or negative values count as 0 (failed).
    groups : array_like of shape (n,)
        Workload ids.

    Returns
    -------
    numpy.ndarray
        ``float64`` values in ``[0, 1]``; a group whose best is 0 gets all zeros.
    """
    y = np.asarray(throughputs, dtype=np.float64)
    y = np.where(np.isfinite(y) & (y > 0), y, 0.0)
    groups = np.asarray(groups)
    out = np.zeros_like(y)
    for g in np.unique(groups):
        idx = groups == g
        best = y[idx].max()
        if best > 0:
            out[idx] = y[idx] / best
    return out


class CostModel:
    """Learned ranking model: features of a schedule -> score (higher = faster).

    Parameters
    ----------
    config : CostModelConfig, optional
        Hyper-parameters and retraining policy (defaults when omitted).

    Examples
    --------
    >>> model = CostModel()
    >>> model.update(features, throughputs, groups=["matmul_64"] * len(features))  # doctest: +SKIP
    >>> order = np.argsort(-model.predict(candidate_features))                       # doctest: +SKIP
    """

    def __init__(self, config: CostModelConfig | None = None):
        self.config = config or CostModelConfig()
        self._booster = None
        self._X = np.zeros((0, 0), dtype=np.float32)
        self._y = np.zeros(0)
        self._groups = np.zeros(0, dtype=object)
        self._pretrain = np.zeros(0, dtype=bool)
        self._n_at_last_train = 0
        self._rng = np.random.default_rng(self.config.seed)

    # ------------------------------------------------------------ data
    @property
    def is_trained(self) -> bool:
        """Whether a booster has been trained (otherwise predictions are random)."""
        return self._booster is not None

    @property
    def n_samples(self) -> int:
        """Number of stored samples (own measurements plus pretraining data)."""
        return int(self._y.size)

    @property
    def n_features(self) -> int | None:
        """Feature width of the stored data, or None before any data."""
        return self._X.shape[1] if self._y.size else None

    def _add(self, features, throughputs, groups, pretrain: bool) -> int:
        X = np.asarray(features, dtype=np.float32)
        if X.size == 0 and np.asarray(throughputs).size == 0:
            return 0                                   # an empty batch is a no-op
        if X.ndim != 2:
            raise ValueError(f"features must be a 2-D array (n, F), got shape {X.shape}")
        y = np.asarray(throughputs, dtype=np.float64).ravel()
        g = np.array([str(x) for x in np.asarray(groups, dtype=object).ravel()], dtype=object)
        if not (X.shape[0] == y.size == g.size):
            raise ValueError(f"features, throughputs and groups must have the same length, "
                             f"got {X.shape[0]}, {y.size} and {g.size}")
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise ValueError(f"features have {X.shape[1]} columns, expected {self.n_features}")
        y = np.where(np.isfinite(y) & (y > 0), y, 0.0)
        X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
        self._X = X if self._y.size == 0 else np.concatenate([self._X, X])
        self._y = np.concatenate([self._y, y])
        self._groups = np.concatenate([self._groups, g])
        self._pretrain = np.concatenate([self._pretrain, np.full(y.size, pretrain)])
        return y.size

    def _should_retrain(self) -> bool:
        c, n = self.config, self.n_samples
        if n < c.min_train_samples:
            return False
        if not self.is_trained:
            return True
        # Growth counts the run's own samples: a model pretrained on hundreds of
        # other workloads' samples still retrains on its first few measurements.
        # why: docs/decisions/003-transfer-learning-from-the-per-user-log.md
        own_before = int((~self._pretrain[:self._n_at_last_train]).sum())   # (samples are only appended)
        new = int((~self._pretrain).sum()) - own_before
        return new > 0 and (new >= c.retrain_min_new_samples or new >= c.retrain_growth * own_before)

    # ------------------------------------------------------------ public API
    def update(self, features, throughputs, groups) -> bool:
        """Add measurements and retrain when the retraining policy says so.

        Parameters
        ----------
        features : array_like of shape (n, F)
            Rows from :func:`cost_model.features.extract_features`.
        throughputs : array_like of shape (n,)
            ``flops / seconds`` or ``1 / latency``; failed candidates give 0
            (non-finite or negative values are treated as 0).
        groups : array_like of shape (n,)
            Workload id of each row (any values; compared as strings).

        Returns
        -------
        bool
            Whether the model was retrained.
        """
        if self._add(features, throughputs, groups, pretrain=False) and self._should_retrain():
            self.fit()
            return True
        return False

    def relabel(self, row: int, throughput: float) -> None:
        """Replace the throughput of stored sample ``row`` (its ``n_samples`` index when added).

        The tuner measures its fastest schedules again and keeps their median:
        the model then learns that estimate instead of the first measurement.
        Takes effect at the next retraining.
        """
        if not 0 <= row < self.n_samples:
            raise IndexError(f"relabel: no sample {row} (the model holds {self.n_samples})")
        self._y[row] = throughput if math.isfinite(throughput) and throughput > 0 else 0.0

    def pretrain(self, features, throughputs, groups) -> None:
        """Train on measurements of other workloads (transfer from earlier logs).

        The samples stay in the training set (behind the model's own
        measurements when :attr:`CostModelConfig.max_train_samples` caps it),
        so later updates keep what they taught.

        Parameters
        ----------
        features, throughputs, groups
            As in :meth:`update`.
        """
        if self._add(features, throughputs, groups, pretrain=True) and self.n_samples >= 2:
            self.fit()

    def treat_as_pretraining(self, except_group) -> None:
        """Count every stored sample of another group than ``except_group`` as pretraining data.

        A saved model holds the samples of every workload tuned before; for a
        new run they are transfer data (retraining then follows the new
        workload's own samples, and a cap keeps its samples first).
        """
        self._pretrain = self._pretrain | (self._groups != str(except_group))

    def fit(self) -> None:
        """Retrain now on the stored samples (at most ``max_train_samples``)."""
        import xgboost as xgb

        if self.n_samples == 0:
            raise ValueError("no samples to train on; call update() first")
        idx = self._training_indices()
        X, y, g = self._X[idx], self._y[idx], self._groups[idx]
        labels = normalize_per_group(y, g)
        params = self.config.xgb_params()
        if self.config.objective == "rank:ndcg":
            labels = np.rint(labels * self.config.ndcg_grades)
        if self.config.objective.startswith("rank:"):
            _, qid = np.unique(g, return_inverse=True)
            order = np.argsort(qid, kind="stable")
            dtrain = xgb.DMatrix(X[order], label=labels[order], qid=qid[order], nthread=self.config.nthread)
        else:
            dtrain = xgb.DMatrix(X, label=labels, nthread=self.config.nthread)
        self._booster = xgb.train(params, dtrain, num_boost_round=self.config.num_boost_round)
        self._n_at_last_train = self.n_samples

    def _training_indices(self) -> np.ndarray:
        cap = self.config.max_train_samples
        own = np.flatnonzero(~self._pretrain)
        pre = np.flatnonzero(self._pretrain)
        if own.size + pre.size <= cap:
            return np.arange(self.n_samples)
        own = own[-cap:]
        pre = pre[max(0, pre.size - (cap - own.size)):] if cap > own.size else pre[:0]
        return np.sort(np.concatenate([own, pre]))

    def predict(self, features) -> np.ndarray:
        """Score candidates; higher means predicted faster.

        Parameters
        ----------
        features : array_like of shape (n, F)
            Feature rows (a single row of shape ``(F,)`` is accepted).

        Returns
        -------
        numpy.ndarray
            ``float64`` scores of shape ``(n,)``.  Only the order inside a
            workload is meaningful.  Before any training the scores are
            uniform random numbers (seeded), so a tuner explores randomly.
        """
        X = np.asarray(features, dtype=np.float32)
        if X.ndim == 1:
            X = X[None, :]
        if X.ndim != 2:
            raise ValueError(f"features must be a 2-D array (n, F), got shape {X.shape}")
        if not self.is_trained:
            return self._rng.random(X.shape[0])
        if X.shape[0] == 0:
            return np.zeros(0)
        if X.shape[1] != self._booster.num_features():
            raise ValueError(f"features have {X.shape[1]} columns, the model was trained "
                             f"on {self._booster.num_features()}")
        X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
        return np.asarray(self._booster.inplace_predict(X), dtype=np.float64)

    # ------------------------------------------------------------ persistence
    def save(self, path) -> None:
        """Write the model to directory ``path`` (created if missing).

        ``path/model.json`` is the booster in xgboost's JSON format (absent
        before training); ``path/state.json`` holds the config, the training
        data (base64 arrays) and the retraining counters.  No pickle.

        Parameters
        ----------
        path : str or os.PathLike
            Target directory.
        """
        from .features import FEATURE_VERSION

        os.makedirs(path, exist_ok=True)
        booster_path = os.path.join(path, "model.json")
        if self._booster is not None:
            self._booster.save_model(booster_path)
        elif os.path.exists(booster_path):
            os.remove(booster_path)
        state = {
            "format_version": STATE_FORMAT_VERSION,
            "feature_version": FEATURE_VERSION,
            "config": asdict(self.config),
            "is_trained": self.is_trained,
            "n_at_last_train": self._n_at_last_train,
            "data": {
                "features": _encode(self._X),
                "throughputs": _encode(self._y),
                "groups": [str(x) for x in self._groups],
                "pretrain": _encode(self._pretrain),
            },
        }
        tmp = os.path.join(path, "state.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, os.path.join(path, "state.json"))

    @classmethod
    def load(cls, path) -> "CostModel":
        """Read a model written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
            Directory given to :meth:`save`.

        Returns
        -------
        CostModel
            Same config, data and booster (identical predictions).  A model
            saved with another feature version is loaded without its booster
            and data, with a warning.
        """
        from .features import FEATURE_VERSION

        with open(os.path.join(path, "state.json")) as f:
            state = json.load(f)
        if state.get("format_version") != STATE_FORMAT_VERSION:
            raise ValueError(f"unsupported cost-model state format {state.get('format_version')!r}, "
                             f"expected {STATE_FORMAT_VERSION}")
        known = {fl.name for fl in fields(CostModelConfig)}
        model = cls(CostModelConfig(**{k: v for k, v in state["config"].items() if k in known}))
        if state.get("feature_version") != FEATURE_VERSION:
            warnings.warn(f"cost model in {path} was trained on feature version {state.get('feature_version')}, "
                          f"current is {FEATURE_VERSION}; starting untrained", stacklevel=2)
            return model
        data = state["data"]
        model._X = _decode(data["features"]).astype(np.float32)
        model._y = _decode(data["throughputs"]).astype(np.float64)
        model._groups = np.array(data["groups"], dtype=object)
        model._pretrain = _decode(data["pretrain"]).astype(bool)
        model._n_at_last_train = int(state["n_at_last_train"])
        if state["is_trained"]:
            import xgboost as xgb

            model._booster = xgb.Booster(params={"nthread": model.config.nthread})
            model._booster.load_model(os.path.join(path, "model.json"))
        return model
