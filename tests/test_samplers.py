"""Optuna samplers selectable with --sampler: each tunes on a fresh install; the scikit-learn GP sampler."""
from __future__ import annotations

import numpy as np
import pytest

from logs import TuningLog, build
from tuner.search import Tuner
from tuner.spec import WorkloadSpec

from .test_tuner import small_config


@pytest.mark.parametrize("sampler", ["cmaes", "gp"])
def test_every_selectable_sampler_tunes_on_a_fresh_install(tmp_path, sampler):
    """--sampler cmaes needs the cmaes package (a dependency); gp is scikit-learn based (no PyTorch)."""
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=40", "K=16"])
    res = Tuner(spec, small_config(12, sampler=sampler, cost_model=False, seed_heuristic=False),
                log=TuningLog(tmp_path / "l")).run()
    assert res.trials == 12 and res.best is not None and not res.errors, res.errors
    kernel = build(spec.tensors(), log=tmp_path / "l")
    a, b = spec.inputs(0)
    c = np.empty((24, 40), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_gp_sampler_finds_the_optimum_of_a_smooth_function_faster_than_random():
    """On a 31 x 31 grid, the GP's expected improvement reaches the peak where random search does not."""
    import optuna
    from tuner.gp_sampler import GPSampler
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def f(trial):
        x, y = trial.suggest_int("x", 0, 30), trial.suggest_int("y", 0, 30)
        return -((x - 21) ** 2) - 2 * (y - 7) ** 2

    found = {}
    for name, sampler in (("gp", GPSampler(seed=3)), ("random", optuna.samplers.RandomSampler(seed=3))):
        study = optuna.create_study(sampler=sampler, direction="maximize")
        study.optimize(f, n_trials=30)
        found[name] = study.best_value
    assert found["gp"] == 0 and found["random"] < 0, found   # random: 30 of 961 points


def test_gp_sampler_spreads_the_asks_of_one_round():
    """Asks made before any is told (a tuning round) are distinct: pending asks count as bad points."""
    import optuna
    from tuner.gp_sampler import GPSampler
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=GPSampler(seed=0), direction="maximize")
    for i in range(10):
        t = study.ask()
        study.tell(t, float(t.suggest_int("x", 0, 50) + t.suggest_int("y", 0, 50)))
    round_ = [study.ask() for _ in range(6)]
    points = {(t.suggest_int("x", 0, 50), t.suggest_int("y", 0, 50)) for t in round_}
    assert len(points) == 6
