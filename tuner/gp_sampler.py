"""A Gaussian-process sampler for Optuna built on scikit-learn (``--sampler gp``).

Optuna's own ``GPSampler`` needs PyTorch, whose PyPI wheel for Linux brings
gigabytes of CUDA libraries; tensortune already depends on scikit-learn, whose
``GaussianProcessRegressor`` is all a GP over a few dozen integer decisions
needs.  The method is textbook Bayesian optimisation:

- the decisions present in every finished trial (Optuna's intersection search
  space; tensortune's decisions are integer indices into ordered choices) are
  scaled to [0, 1];
- a GP with a Matern-5/2 kernel plus white noise is fitted to the finished
  trials' values (measurements are noisy; past 256 trials, to the 64 best and
  the 192 newest);
- the next point is the one of ``n_candidates`` that maximises the expected
  improvement: random points plus one- and two-decision neighbours of the best
  trials (the space is large and mostly flat, so purely random candidates
  rarely land near the optimum);
- a round asks several points before any is told: asked, unfinished trials
  enter the fit with the worst value seen (a constant liar, as TPE's
  ``constant_liar``), so one round's asks spread out instead of repeating;
- until ``n_startup_trials`` trials have finished, and for decisions outside
  the intersection space (conditional ones), it samples at random.
"""
from __future__ import annotations

import functools
import math

import numpy as np


@functools.cache
def _make():
    import optuna
    from optuna.distributions import IntDistribution
    from optuna.search_space import IntersectionSearchSpace
    from optuna.trial import TrialState

    class GPSampler(optuna.samplers.BaseSampler):
        """Expected-improvement Bayesian optimisation with a scikit-learn GP (maximises the objective)."""

        def __init__(self, seed: int | None = None, n_startup_trials: int = 8, n_candidates: int = 2000):
            self._rng = np.random.default_rng(seed)
            self._random = optuna.samplers.RandomSampler(seed=seed)
            self._space = IntersectionSearchSpace()
            self.n_startup_trials = n_startup_trials
            self.n_candidates = n_candidates
            self._kernel = (None, None)   # (finished trials, kernel fitted on them): asks of a round reuse it

        def reseed_rng(self) -> None:
            self._rng = np.random.default_rng()
            self._random.reseed_rng()

        def infer_relative_search_space(self, study, trial) -> dict:
            return {name: d for name, d in self._space.calculate(study).items()
                    if isinstance(d, IntDistribution) and d.high > d.low and d.step == 1}

        def sample_relative(self, study, trial, search_space: dict) -> dict:
            if not search_space:
                return {}
            names = sorted(search_space)
            done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if all(n in t.params for n in names) and t.value is not None and math.isfinite(t.value)]
            if len(done) < self.n_startup_trials:
                return {}
            if len(done) > 256:        # a GP fit is cubic in its points: the 64 best and the 192 newest
                best = sorted(done, key=lambda t: t.value, reverse=study.direction.name == "MAXIMIZE")[:64]
                done = best + [t for t in done[-192:] if t not in best]
            lo = np.array([search_space[n].low for n in names], float)
            span = np.array([search_space[n].high - search_space[n].low for n in names], float)
            scale = lambda params: (np.array([params[n] for n in names], float) - lo) / span  # noqa: E731
            sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
            X = [scale(t.params) for t in done]
            y = [sign * t.value for t in done]
            pending = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                       if t.number != trial.number and all(n in t.params for n in names)]
            X += [scale(t.params) for t in pending]
            y += [min(y)] * len(pending)          # constant liar: an asked point counts as a bad one
            X, y = np.array(X), np.array(y)
            # The kernel's hyperparameters are fitted once per set of finished trials; the other asks
            # of a round only add their liars (one Cholesky factorisation, no optimisation).
            key = (len(done), tuple(names))
            gp = _fit(X, y, int(self._rng.integers(2 ** 31)), self._kernel[1] if self._kernel[0] == key else None)
            self._kernel = (key, gp.kernel_)
            cand = np.round(self._candidates(X[:len(done)], y[:len(done)], span) * span) / span
            mu, sd = gp.predict(cand, return_std=True)
            best = y[:len(done)].max()
            z = (mu - best) / np.maximum(sd, 1e-9)
            ei = (mu - best) * _norm_cdf(z) + sd * _norm_pdf(z)
            taken = {tuple(np.round(x * span).astype(int)) for x in X}
            for i in np.argsort(-ei):
                point = np.round(cand[i] * span).astype(int)
                if tuple(point) not in taken:
                    return {n: int(lo[j] + point[j]) for j, n in enumerate(names)}
            return {}

        def _candidates(self, X: np.ndarray, y: np.ndarray, span: np.ndarray) -> np.ndarray:
            rng, d = self._rng, X.shape[1]
            n_local = self.n_candidates // 2
            parents = X[np.argsort(-y)[:5]]
            local = parents[rng.integers(len(parents), size=n_local)].copy()
            for row in local:               # one or two decisions moved to another value
                for j in rng.choice(d, size=min(d, 1 + int(rng.random() < 0.5)), replace=False):
                    row[j] = rng.integers(span[j] + 1) / span[j]
            return np.vstack([rng.random((self.n_candidates - n_local, d)), local])

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self._random.sample_independent(study, trial, param_name, param_distribution)

    return GPSampler


def _fit(X: np.ndarray, y: np.ndarray, seed: int, kernel=None):
    """A GP fitted to (X, y); with ``kernel`` given, its hyperparameters are kept as they are."""
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
    fixed = kernel is not None
    if not fixed:
        kernel = ConstantKernel(1.0) * Matern(length_scale=np.full(X.shape[1], 0.5),
                                              length_scale_bounds=(1e-2, 1e2), nu=2.5) + WhiteKernel(1e-2, (1e-6, 1.0))
    gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=seed, optimizer=None if fixed else "fmin_l_bfgs_b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return gp.fit(X, y)


def _norm_pdf(z):
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _norm_cdf(z):
    from scipy.special import ndtr
    return ndtr(z)


def GPSampler(seed: int | None = None, **kw):
    """A new GP sampler (see the module docstring); the class is built on first use (lazy imports)."""
    return _make()(seed=seed, **kw)
