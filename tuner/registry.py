"""The registry of open studies in a shared Optuna storage: what a worker needs to join one.

``tensortune tune --storage URL`` registers its study in the study's user attributes: the
workload (:meth:`tuner.spec.WorkloadSpec.to_json`, so a worker rebuilds it), the target and its
fingerprint (a worker joins only studies of its own), the sampler, the seed, the budget (the
measured trials the study should hold when the run is over) and whether the run is still open.
A worker lists the storage's studies (:func:`open_studies`) and joins one with work left.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lease import BUDGET_ATTR
from .study import target_fingerprint

KEY = "tensortune"                  # study user attr: the registration, a dict
BUDGET = BUDGET_ATTR                # study user attr: measured trials the study should hold
OPEN = "tensortune.open"            # study user attr: True while the registering run goes on
VERSION = 1


@dataclass(frozen=True)
class Registration:
    """One registered study."""
    name: str
    spec: dict              # WorkloadSpec.to_json()
    target: dict            # the target record (cpu, features, threads)
    fingerprint: str
    sampler: str
    seed: int
    cost_model: bool
    space: str | None       # "file.py:function" of a hand-written space, or None (generated)
    lease_s: float
    budget: int
    open: bool
    constants: tuple = ()   # inputs packed outside the timed kernel (TuneConfig.constants)


def register(study, *, spec, target: dict, config, space: str | None, lease_s: float, budget: int) -> None:
    """Record ``study`` as open for workers, with ``budget`` measured trials to reach."""
    # (three writes: the registration goes last, so that a worker never sees it without the others)
    study.set_user_attr(BUDGET, int(budget))
    study.set_user_attr(OPEN, True)
    study.set_user_attr(KEY, {"version": VERSION, "spec": spec.to_json(), "target": dict(target),
                              "fingerprint": target_fingerprint(target), "sampler": config.sampler,
                              "seed": int(config.seed), "cost_model": bool(config.cost_model),
                              "space": space, "lease_s": float(lease_s),
                              "constants": list(config.constants)})


def close(study) -> None:
    """Mark ``study``'s run over: workers leave it once their round is told."""
    study.set_user_attr(OPEN, False)


def read(name: str, attrs: dict) -> Registration | None:
    """The registration in a study's user attributes ``attrs`` (None if it has none)."""
    reg = attrs.get(KEY)
    if not isinstance(reg, dict) or reg.get("version") != VERSION:
        return None
    return Registration(name, reg["spec"], reg["target"], reg["fingerprint"], reg["sampler"], reg["seed"],
                        reg["cost_model"], reg.get("space"), reg["lease_s"], int(attrs.get(BUDGET, 0)),
                        bool(attrs.get(OPEN, False)), tuple(reg.get("constants") or ()))


def open_studies(storage: str, fingerprint: str, name: str | None = None) -> tuple:
    """``(open, other)``: registrations of the open studies of target ``fingerprint`` (only
    study ``name``, if given), and those of the open studies of other targets, passed over."""
    import optuna
    found, other = [], []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if name is not None and summary.study_name != name:
            continue
        reg = read(summary.study_name, summary.user_attrs)
        if reg is None or not reg.open:
            continue
        if reg.fingerprint != fingerprint:
            other.append(reg)
            continue
        found.append(reg)
    return found, other


def lookup(storage: str, name: str) -> Registration | None:
    """The registration of study ``name`` in ``storage`` (None if there is no such registered study)."""
    import optuna
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name == name:
            return read(name, summary.user_attrs)
    return None


def is_open(study) -> bool:
    return bool(study.user_attrs.get(OPEN, False))


def budget(study) -> int:
    return int(study.user_attrs.get(BUDGET, 0))
