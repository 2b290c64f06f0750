"""What a round measures: the sampler's asks, prepared in a thread and screened by the cost model.

:class:`Screening` is the policy (how many asks per measured candidate, which of them are
measured); :class:`Asker` asks the Optuna study and prepares the candidates, in a background
thread while the previous round compiles.  The asking thread sees the tuner only through a
:class:`Preparer` (the run's :class:`tuner.candidates.Candidates`), the study and the run's state.
"""
from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

from schedules.decisions import MutatedDecisions

from .candidates import Candidate
from .state import RunState, decision_key


class Preparer(Protocol):
    """What the asking thread needs of a tuner: a candidate from a trial or a decision source."""

    def prepare(self, trial, decisions: dict | None = None, src=None) -> Candidate: ...


class Screening:
    """The model screens the sampler's proposals and never replaces them.

    Once the cost model ranks (it is trained on ``model_warmup`` samples, own or transfer), a
    round asks ``asks_per_measure`` times more candidates than it measures: the sampler's first
    asks (an ``epsilon`` share of the batch, exploration the model cannot veto) plus the top of
    the model's ranking of the others.  Every measured candidate is then one of the sampler's
    proposals, so it learns from all of them.  ``mutants_per_measure`` adds variants of the best
    schedules for the model to rank beside the asks (off by default: the model then picked mostly
    near-copies of the best schedule).  Why: docs/decisions/001-search-policy-model-screens-tpe-asks.md.
    """

    def __init__(self, config):
        self.config = config      # a TuneConfig

    def ranks(self, model) -> bool:
        """Whether the model picks candidates this round (before that, the sampler's asks are measured)."""
        return model is not None and model.is_trained and model.n_samples >= self.config.model_warmup

    def n_ask(self, want: int, model) -> tuple:
        """(sampler asks, mutants) to prepare for ``want`` measurements."""
        if not self.ranks(model):
            return want, 0
        cfg = self.config
        return max(want, want * cfg.asks_per_measure), want * cfg.mutants_per_measure

    def pick(self, pool: list, want: int, model):
        """``(picked, rest)``: the sampler's first asks (an ``epsilon`` share, in its order) plus the top
        of the model's ranking; without a model (None), the sampler's order is kept."""
        if model is None or len(pool) <= want:
            for c in pool[:want]:
                c.origin = "unranked" if c.origin == "ask" else "stand-in"    # nothing for the model to screen
            return pool[:want], pool[want:]
        n_explore = min(want - 1, max(1, round(want * self.config.epsilon))) if want > 1 else 0
        explore = [i for i, c in enumerate(pool) if c.trial is not None][:n_explore]
        others = [i for i in range(len(pool)) if i not in set(explore)]
        scores = model.predict(np.stack([pool[i].features for i in others]))
        ranked = [others[j] for j in sorted(range(len(others)), key=lambda j: -scores[j])]
        chosen = explore + ranked[:want - len(explore)]
        for i in explore:
            pool[i].origin = "sampler"
        for i in ranked[:want - len(explore)]:
            pool[i].origin = "model:" + pool[i].origin
        taken = set(chosen)
        return [pool[i] for i in chosen], [pool[i] for i in range(len(pool)) if i not in taken]


class Asker:
    """Asks and prepares one round's candidates, optionally in a background thread.

    ``pause()`` (called by the measurer just before it starts timing) blocks
    until the thread is between two candidates and holds it there, so no
    Python work competes with a timed kernel; ``resume()`` lets it finish.
    Invalid candidates are told to the study here and handed to the caller by
    ``take()`` (to be logged there: the log is appended from one thread only).
    """

    def __init__(self, candidates: Preparer, study, state: RunState, rng, n_ask: int, n_mutants: int = 0,
                 finish: bool = False):
        self.candidates, self.study, self.st, self.rng = candidates, study, state, rng
        self.n_ask, self.n_mutants = n_ask, n_mutants
        # Lower new candidates all the way here (``Candidate.func``), in this thread: right when
        # every one will be measured (no model screens them); otherwise the measured ones are
        # lowered when they are picked.
        self.finish = finish
        # the parents of this round's mutants: the best measured when the round is asked
        self.parents = [d for _, d in state.parents]
        self.pool: list = []
        self.invalid: list = []
        self._cv = threading.Condition()
        self._paused = False
        self._busy = False
        self._thread = None
        self._error = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name="tensortune-asks", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        with self._cv:
            self._paused = True
            while self._busy:
                self._cv.wait()

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    def take(self, on_invalid=None) -> list:
        """The pooled candidates (waits for the thread); first, ``on_invalid(candidates)`` receives
        those that gave no legal schedule, also when the thread failed (its error is raised here)."""
        self.resume()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        invalid, self.invalid = self.invalid, []
        if on_invalid is not None:
            on_invalid(invalid)
        if self._error is not None:
            raise self._error
        pool, self.pool = self.pool, []
        return pool

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller by take()
            self._error = err
        finally:
            with self._cv:            # never leave pause() waiting on a dead thread
                self._busy = False
                self._cv.notify_all()

    def _wait_turn(self) -> None:
        with self._cv:
            self._busy = False
            self._cv.notify_all()
            while self._paused:
                self._cv.wait()
            self._busy = True

    def _is_new(self, cand: Candidate) -> bool:
        key = decision_key(cand.decisions)
        st = self.st
        if key in st.seen or key in st.fresh or cand.nest in st.seen_funcs:
            return False   # the same decisions, or other decisions giving an identical loop nest
        st.fresh.add(key)
        st.seen_funcs.add(cand.nest)
        if self.finish:
            cand.func   # noqa: B018 - runs the code-generation passes now (a failure sets cand.error)
        self.pool.append(cand)
        return True

    def _mutant(self) -> bool:
        """Pool one new variant of a parent (the better ones more often); False if none was made.

        Waits for its turn first: each prepared candidate is one unit of work between pauses.
        """
        if not self.parents:
            return False
        self._wait_turn()
        rng = self.rng
        parent = rng.choices(self.parents, weights=[1 / (i + 1) for i in range(len(self.parents))])[0]
        names = sorted(parent)
        mutate = rng.sample(names, min(len(names), 1 if rng.random() < 0.7 else 2))
        cand = self.candidates.prepare(None, src=MutatedDecisions(parent, mutate, rng))
        cand.origin = "mutant"
        return cand.error is None and self._is_new(cand)

    def run(self) -> None:
        import optuna
        st, study = self.st, self.study
        for _ in range(self.n_ask):
            self._wait_turn()
            cand = self.candidates.prepare(study.ask())
            st.asked += 1
            if cand.error is not None:
                st.invalid += 1
                st.errors[str(cand.error.error_kind)] += 1
                study.tell(cand.trial, 0.0)
                self.invalid.append(cand)
            elif self._is_new(cand):
                st.stale = -1
            else:
                study.tell(cand.trial, state=optuna.trial.TrialState.FAIL)   # a repeat: withdrawn
                # A converged sampler (TPE after a few hundred trials) keeps proposing what
                # was measured: a variant of one of the best schedules takes the repeat's
                # place, so the run goes on searching; only when those repeat too does the
                # space count as exhausted.
                if any(self._mutant() for _ in range(3)):
                    st.stale = -1
            st.stale += 1
        # Local search around the best schedules for the model to screen.  A mutant
        # is no Optuna trial: an unmeasured one is dropped (the sampler never hears
        # of it), a measured one is added to the study as a completed trial.
        made = 0
        for _ in range(3 * self.n_mutants if self.parents else 0):
            if made >= self.n_mutants:
                break
            made += self._mutant()
        with self._cv:
            self._busy = False
            self._cv.notify_all()
