"""Leases and claims on the trials of a study that several processes tune at once.

Optuna's heartbeat covers ``study.optimize`` only; the tuner asks and tells.  So each process
keeps a lease of its own in the study (a study user attribute ``tensortune.lease:<owner>``
holding an expiry time, renewed by a thread every quarter of the lease) and marks each trial it
asks with its owner (trial user attribute ``tensortune.owner``).  One renewal per process, not
one per trial, keeps the database writes few however many trials a process holds.  A trial
whose owner's lease ran out is failed by whichever process of the study sees it first
(:meth:`Leases.sweep`); if it was being measured its parameters are enqueued again (the
candidate is re-asked).  The owner's late report of such a trial is ignored with a counted
warning (:class:`LeasedStudy`).

Before measuring, a process *claims* the round's trials (``tensortune.claim``: claim time and
owner) and keeps only those the claims admit (:func:`tally`): walked in claim order, a claim is
admitted while the study's measured trials plus the earlier admitted claims stay within the
budget, and its parameters were neither measured nor claimed before.  Every process computes the
same walk, so no candidate is measured twice and the budget is not overrun.  Claims are compared
by the claiming machine's clock: the clocks of a study's machines must agree to well within
:data:`CLAIM_GRACE_S` (NTP does).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field

OWNER = "tensortune.owner"          # trial user attr: the process that asked the trial
CLAIM = "tensortune.claim"          # trial user attr: [claim time, owner] once it is to be measured (None: withdrawn)
REASK = "tensortune.reask"          # enqueued trial user attr: the number of the expired trial it repeats
BUDGET_ATTR = "tensortune.budget"   # study user attr: measured trials the study should hold (tuner.registry)
LEASE_PREFIX = "tensortune.lease:"  # study user attr + owner: the owner's lease expiry (seconds since the epoch)
CLAIM_GRACE_S = 0.1                 # a claim is checked this long after it is written: earlier claims are in by then


def owner_id() -> str:
    """``host:pid:random``: one process among the study's processes (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def owner_pid(owner: str) -> int | None:
    """The process id in an :func:`owner_id` (None if it is not one)."""
    try:
        return int(str(owner).split(":")[1])
    except (IndexError, ValueError):
        return None


def params_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=str)


@dataclass
class Tally:
    """What a study holds against its budget at one moment."""
    measured: int = 0                              # COMPLETE trials that were claimed (measured)
    admitted: dict = field(default_factory=dict)   # trial number -> owner: claims within the budget
    taken: set = field(default_factory=set)        # params keys measured, or claimed and admitted

    def others(self, owner: str) -> int:
        """Admitted claims of processes other than ``owner``."""
        return sum(1 for o in self.admitted.values() if o != owner)


def tally(study, budget: int) -> Tally:
    """Count ``study``'s measured trials and walk its open claims in claim order (see the module)."""
    import optuna
    states = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False, states=(states.COMPLETE, states.RUNNING))
    out = Tally()
    claims = []
    for t in trials:
        claim = t.user_attrs.get(CLAIM)
        if t.state == states.COMPLETE:
            out.taken.add(params_key(t.params))
            if claim is not None:
                out.measured += 1
        elif claim is not None:
            claims.append(t)
    for t in sorted(claims, key=lambda t: (t.user_attrs[CLAIM][0], t.number)):
        key = params_key(t.params)
        if key in out.taken or out.measured + len(out.admitted) >= budget:
            continue
        out.taken.add(key)
        out.admitted[t.number] = t.user_attrs[CLAIM][1]
    return out


def measured_by(study, since: float) -> dict:
    """{owner: trials} of ``study``'s trials measured on claims made at or after ``since`` (epoch seconds)."""
    import optuna
    out: dict = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        when, owner = t.user_attrs.get(CLAIM) or (None, None)
        if when is not None and when >= since:
            out[owner] = out.get(owner, 0) + 1
    return out


def claim(trials: list, owner: str) -> None:
    """Mark ``trials`` (this process's ``optuna.Trial`` objects) as about to be measured."""
    now = time.time()
    for trial in trials:
        trial.set_user_attr(CLAIM, [now, owner])


def unclaim(trials: list) -> None:
    """Withdraw the claims on ``trials`` that were not admitted: if this process dies now, their
    leases run out and nobody asks them again."""
    for trial in trials:
        trial.set_user_attr(CLAIM, None)


class Leases:
    """This process's lease in ``study`` (renewed by a thread after :meth:`start`) and the expiry
    of every process's leases (:meth:`sweep`).

    ``expired`` counts the trials this process failed because their owner's lease ran out,
    ``late`` this process's own reports that came after another process had failed the trial.
    """

    def __init__(self, study, lease_s: float, owner: str | None = None):
        self.study = study
        self.lease_s = float(lease_s)
        self.owner = owner or owner_id()
        self.expired = 0
        self.late = 0
        self.reasked = []           # numbers of the expired trials this process enqueued again
        self._stop = threading.Event()
        self._thread = None
        self._sweeping = threading.Lock()
        self._warned = False

    @property
    def interval(self) -> float:
        return max(0.2, min(self.lease_s / 4, 15.0))

    def start(self) -> Leases:
        self.renew()
        self._thread = threading.Thread(target=self._run, name="tensortune-lease", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing and give the lease up (any trial this process still holds expires now)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._write(0.0)

    def renew(self) -> None:
        self._write(time.time() + self.lease_s)

    def _write(self, until: float) -> None:
        try:
            self.study.set_user_attr(LEASE_PREFIX + self.owner, until)
        except Exception as err:  # noqa: BLE001 - a database hiccup: the next renewal tries again
            if not self._warned:
                self._warned = True
                warnings.warn(f"cannot renew this process's lease in the study: {type(err).__name__}: {err}",
                              RuntimeWarning, stacklevel=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew()
            try:
                self.sweep()
            except Exception:  # noqa: BLE001, S110 - the tuning loop sweeps too, and reports errors there
                pass

    def sweep(self) -> list:
        """Fail the running trials whose owner's lease ran out (and trials asked without an owner that
        are older than a lease); enqueue again those that were being measured (claimed and admitted
        within the study's budget ``tensortune.budget``).  Returns the failed trials' numbers."""
        import optuna
        from optuna.exceptions import UpdateFinishedTrialError
        with self._sweeping:
            now = time.time()
            attrs = self.study.user_attrs
            leases = {k[len(LEASE_PREFIX):]: v for k, v in attrs.items() if k.startswith(LEASE_PREFIX)}
            expired = []
            for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                owner = t.user_attrs.get(OWNER)
                until = leases.get(owner) if owner is not None else None
                if until is None:       # asked by a process that died before marking it, or by another tool
                    until = (t.datetime_start.timestamp() if t.datetime_start else now) + self.lease_s
                if until <= now:
                    expired.append(t)
            # the claims' walk as it stands before any of them is failed
            admitted = tally(self.study, int(attrs.get(BUDGET_ATTR, 0))).admitted \
                if any(t.user_attrs.get(CLAIM) is not None for t in expired) else {}
            failed = []
            for t in expired:
                try:
                    self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                except (ValueError, UpdateFinishedTrialError):
                    continue            # told meanwhile, by its owner or by another sweeping process
                failed.append(t.number)
                # only a claim the walk admitted was being measured; an ask the sampler makes again anyway
                if t.number in admitted:
                    self.study.enqueue_trial(t.params, user_attrs={REASK: t.number})
                    self.reasked.append(t.number)
            self.expired += len(failed)
            return failed


class LeasedStudy:
    """An Optuna study whose asked trials carry this process's owner mark, and whose late tells
    (the trial was failed meanwhile because this process's lease ran out) are ignored with a
    counted warning.  Everything else is the study's own."""

    def __init__(self, study, leases: Leases):
        self.raw = study
        self.leases = leases

    def __getattr__(self, name):
        return getattr(self.raw, name)

    def ask(self, *args, **kwargs):
        trial = self.raw.ask(*args, **kwargs)
        trial.set_user_attr(OWNER, self.leases.owner)
        return trial

    def tell(self, trial, values=None, state=None, skip_if_finished: bool = False):
        from optuna.exceptions import UpdateFinishedTrialError
        try:
            return self.raw.tell(trial, values, state=state, skip_if_finished=skip_if_finished)
        except (ValueError, UpdateFinishedTrialError) as err:
            if isinstance(err, ValueError) and "Cannot tell" not in str(err):
                raise
        number = getattr(trial, "number", trial)
        self.leases.late += 1
        warnings.warn(f"trial {number} was failed by another process after this process's lease ran out; "
                      f"its result is kept in the log only ({self.leases.late} so far)", RuntimeWarning,
                      stacklevel=2)
        return None
