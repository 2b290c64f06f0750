"""The registry of open studies in a shared Optuna storage: what a worker needs to join one.

``tensortune tune --storage URL`` registers its study in the study's user attributes: the
workload (:meth:`tuner.spec.WorkloadSpec.to_json`, so a worker rebuilds it), the target and its
fingerprint (a worker joins only studies of its own), the sampler, the seed, the budget (the
measured trials the study should hold when the run is over) and whether the run is still open.
A worker lists the storage's studies (:func:`open_studies`) and joins one with work left.

A whole-model run (``tensortune tune-model --storage URL``, :mod:`tuner.model_coordinator`)
registers one study per task, all with the same ``run`` id and each with the task's log meta
(model, task id, weight); it raises a study's budget by a round at a time and writes each
study's priority (the task scheduler's wish for it).  Model workers (:mod:`tuner.model_workers`)
mark the study they measure (``tensortune.on:<owner>``, an expiry time), so that another worker
prefers a task nobody measures, and mark a task whose space is used up (``tensortune.dead``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .study import connect  # noqa: F401 - the storage object of a URL (workers list studies through it)

from .lease import BUDGET_ATTR
from .study import target_fingerprint

KEY = "tensortune"                  # study user attr: the registration, a dict
BUDGET = BUDGET_ATTR                # study user attr: measured trials the study should hold
OPEN = "tensortune.open"            # study user attr: True while the registering run goes on
PRIORITY = "tensortune.priority"    # study user attr: how much a model run wants this task now (higher first)
DEAD = "tensortune.dead"            # study user attr: why this task gets no more trials (a model worker says)
ON_PREFIX = "tensortune.on:"        # study user attr + owner: a model worker measures it until this time
WAITING_PREFIX = "tensortune.waiting:"  # study user attr + owner: a model worker with nothing to do, until this time
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
    run: str | None = None  # the model run whose task this study is (None: a single-workload run)
    meta: dict | None = None    # the task's log meta (model, task id, weight)
    constants: tuple = ()   # inputs packed outside the timed kernel (TuneConfig.constants)




def register(study, *, spec, target: dict, config, space: str | None, lease_s: float, budget: int,
             run: str | None = None, meta: dict | None = None) -> None:
    """Record ``study`` as open for workers, with ``budget`` measured trials to reach (``run``,
    ``meta``: the model run and task it belongs to)."""
    # (three writes: the registration goes last, so that a worker never sees it without the others)
    study.set_user_attr(BUDGET, int(budget))
    study.set_user_attr(OPEN, True)
    study.set_user_attr(KEY, {"version": VERSION, "spec": spec.to_json(), "target": dict(target),
                              "fingerprint": target_fingerprint(target), "sampler": config.sampler,
                              "seed": int(config.seed), "cost_model": bool(config.cost_model),
                              "space": space, "lease_s": float(lease_s), "run": run, "meta": meta,
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
                        bool(attrs.get(OPEN, False)), reg.get("run"), reg.get("meta"),
                        tuple(reg.get("constants") or ()))


def open_studies(storage: str, fingerprint: str, name: str | None = None) -> tuple:
    """``(open, other)``: registrations of the open studies of target ``fingerprint`` (only
    study ``name``, if given), and those of the open studies of other targets, passed over."""
    import optuna
    found, other = [], []
    for summary in optuna.get_all_study_summaries(connect(storage), include_best_trial=False):
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
    for summary in optuna.get_all_study_summaries(connect(storage), include_best_trial=False):
        if summary.study_name == name:
            return read(name, summary.user_attrs)
    return None


def is_open(study) -> bool:
    return bool(study.user_attrs.get(OPEN, False))


def budget(study) -> int:
    return int(study.user_attrs.get(BUDGET, 0))


def set_budget(study, budget: int) -> None:
    study.set_user_attr(BUDGET, int(budget))


def priority(attrs: dict) -> float:
    return float(attrs.get(PRIORITY, 0.0))


def occupants(attrs: dict, now: float, prefix: str = ON_PREFIX) -> dict:
    """{owner: expiry} of the model workers measuring a study now (its user attributes ``attrs``;
    with ``prefix=WAITING_PREFIX``: of those waiting for work)."""
    return {k[len(prefix):]: v for k, v in attrs.items() if k.startswith(prefix) and v > now}


def model_studies(storage: str, fingerprint: str, run: str | None = None, closed: bool = False) -> list:
    """``[(registration, user attrs)]`` of the model runs' studies of target ``fingerprint`` (of
    run ``run`` only, if given), open ones only unless ``closed``."""
    import optuna
    out = []
    for summary in optuna.get_all_study_summaries(connect(storage), include_best_trial=False):
        reg = read(summary.study_name, summary.user_attrs)
        if reg is None or reg.run is None or reg.fingerprint != fingerprint or (run is not None and reg.run != run):
            continue
        if reg.open or closed:
            out.append((reg, summary.user_attrs))
    return out
