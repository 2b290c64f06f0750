"""The Optuna study of a tuning run: samplers, storage, trials told without an ask.

A SQLite study is searched as a copy in memory and written back when the run ends
(:func:`open_study`, :func:`write_back`), because SQLite commits every suggested value
as a transaction of its own, which slowed tuning down more than twofold
(docs/decisions/004-sqlite-study-searched-in-memory.md).  Other databases
(PostgreSQL, MySQL) are used live, so that several processes tuning one study see each
other's trials.
"""
from __future__ import annotations

import functools
import hashlib

SAMPLERS = ("tpe", "random", "cmaes", "gp")


class StorageError(RuntimeError):
    """The Optuna storage (``--storage`` URL) cannot be opened; the message says why in one line."""


def target_fingerprint(target: dict) -> str:
    """``"<cpu>-t<threads>-<hash of the features>"``: measurements of two targets with different
    fingerprints never share a study (a kernel's speed depends on all three)."""
    features = hashlib.sha1(str(target.get("features", "")).encode()).hexdigest()[:8]
    return f"{target['cpu']}-t{target['threads']}-{features}"


def study_name(workload_key: str, target: dict, sampler: str, space_tag: str) -> str:
    """The study of one workload on one target: its name holds the workload key and the target's fingerprint."""
    return f"{workload_key}-{target_fingerprint(target)}-{sampler}-{space_tag}"


def is_shared(storage: str | None) -> bool:
    """Whether ``storage`` is a database server several processes tune one study in at once
    (PostgreSQL, MySQL), rather than a SQLite file searched as a copy in memory."""
    return storage is not None and not str(storage).startswith("sqlite")


def make_sampler(name: str, seed: int):
    import optuna
    if name == "tpe":
        # The spaces are conditional (a pack or split decision exists only when
        # its stage does): ``group`` models each set of co-occurring decisions
        # jointly instead of falling back to one independent TPE per decision
        # (slower, and blind to interactions).  ``constant_liar`` counts a
        # round's pending asks as bad so the round's asks spread out
        # (docs/decisions/005-tpe-grouped-with-constant-liar.md).
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                              n_startup_trials=8)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":      # Optuna's GPSampler needs PyTorch; this one uses scikit-learn
        from .gp_sampler import GPSampler
        return GPSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


def finished_states():
    """The trial states a sampler learns from (withdrawn asks end FAIL and are not kept)."""
    import optuna
    return (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def add_trial(study, decisions: dict, choices: dict, value: float) -> None:
    """Tell the study a measurement it did not ask for (a resumed record or a mutant)."""
    import optuna
    from optuna.distributions import IntDistribution
    params = {k: choices[k].index(v) for k, v in decisions.items()}
    dists = {k: IntDistribution(0, len(choices[k]) - 1) for k in params}
    study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))


# A PostgreSQL commit then returns before the server has flushed it to disk: Optuna commits every
# suggested parameter, and waiting for the flush made asking, not measuring, most of a worker's time.
# A server crash can lose the last commits; their trials are re-asked (leases, tuner.lease) and the
# measurements themselves are in the JSONL logs.
POSTGRES_OPTIONS = "-c synchronous_commit=off"


@functools.lru_cache(maxsize=8)
def connect(url: str):
    """One Optuna storage object per URL and process: building one (an engine, a schema check)
    costs a fraction of a second, and workers list the studies before every batch."""
    import optuna
    # (building the storage creates Optuna's tables in a fresh database: workers starting together race)
    if url.startswith("postgresql"):
        return retry_schema_race(lambda: optuna.storages.RDBStorage(
            url, engine_kwargs={"connect_args": {"options": POSTGRES_OPTIONS}}))
    return retry_schema_race(lambda: optuna.storages.get_storage(url))


def open_study(storage: str | None, name: str, sampler):
    """``(study, mirror)``: the study to search and, for a SQLite ``storage``, the stored study
    that :func:`write_back` updates (else None).  Raises :class:`StorageError` in one line."""
    import optuna
    try:
        where = connect(storage) if is_shared(storage) else storage
        study = retry_schema_race(lambda: optuna.create_study(storage=where, sampler=sampler, study_name=name,
                                                              direction="maximize", load_if_exists=True))
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 - SQLAlchemy/Optuna errors of a bad URL or unreachable database
        raise StorageError(f"cannot open the Optuna storage {storage!r}: {type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else ''}") from None
    if storage is None or is_shared(storage):
        return study, None
    copy = optuna.create_study(sampler=sampler, study_name=name, direction="maximize")
    copy.add_trials(study.get_trials(deepcopy=False, states=finished_states()))
    return copy, study


# How losing that race shows: a row another process inserted first (IntegrityError / UniqueViolation,
# e.g. pg_type's index while both create Optuna's enum type) or an object it committed between our
# existence check and our CREATE (DuplicateTable / DuplicateObject, a ProgrammingError).
SCHEMA_RACES = frozenset({"IntegrityError", "UniqueViolation", "DuplicateTable", "DuplicateObject"})


def lost_schema_race(err: BaseException) -> bool:
    """Whether ``err`` (an SQLAlchemy error; its ``orig`` the driver's) says another process created it first."""
    return bool({type(err).__name__, type(getattr(err, "orig", None)).__name__} & SCHEMA_RACES)


def retry_schema_race(fn, attempts: int = 5):
    """``fn()``, tried again when it lost a race with another process creating the same tables or study
    in a fresh database (processes of a shared study often start together)."""
    import time
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - SQLAlchemy's errors, without importing SQLAlchemy here
            if not lost_schema_race(err) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def write_back(study, mirror, synced: set):
    """Add ``study``'s finished trials whose numbers are not in ``synced`` to ``mirror``; returns
    the mirror, or None (after one warning) when it cannot be written: tuning goes on."""
    if mirror is None:
        return None
    try:
        new = [t for t in study.get_trials(deepcopy=False, states=finished_states()) if t.number not in synced]
        mirror.add_trials(new)
        synced.update(t.number for t in new)
        return mirror
    except Exception as err:  # noqa: BLE001 - the log holds every measurement; the study copy is a cache
        import warnings
        warnings.warn(f"cannot write the Optuna study back to its storage: {type(err).__name__}: {err}; "
                      "tuning goes on (a resumed run rebuilds the study from the log)", RuntimeWarning,
                      stacklevel=3)
        return None
