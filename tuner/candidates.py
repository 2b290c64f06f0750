"""A tuning run's candidates: decisions -> schedule -> loop nest -> features, and their log records."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from logs import TuningRecord, utc_now
from schedules.decisions import FixedDecisions, OptunaDecisions

from .measure import MeasureResult, finish_lowering, replay_and_lower
from .prepack import PackedKernel, prepack
from .spec import WorkloadSpec


@dataclass
class Candidate:
    trial: object
    decisions: dict
    schedule: object = None
    nest: object = None      # the schedule's own loop nest: features read it, asks are told apart by it
    features: object = None
    error: MeasureResult | None = None
    choices: dict = field(default_factory=dict)   # decision name -> the choices it was offered
    origin: str = "ask"      # "ask" (the sampler's) or "mutant"; once picked, the arm that chose it
    lowered: object = field(default=None, repr=False)   # the loop nest code generation compiles, once made
    packed: object = field(default=None, repr=False)    # tuner.prepack.Prepacked: constants packed outside

    @property
    def func(self):
        """What the measurer runs: the loop nest code generation compiles (a
        :class:`tuner.prepack.PackedKernel` when constant inputs are packed outside the kernel), or
        None if the candidate did not lower (then ``error`` says why).  ``nest`` goes through the
        code-generation passes on first use: once the cost model ranks, most asks are screened out
        and never need them."""
        if self.lowered is None and self.nest is not None and self.error is None:
            self.lowered, self.error = finish_lowering(self.nest)
        if self.lowered is not None and self.packed is not None:
            return PackedKernel(self.lowered, self.packed)
        return self.lowered


class Candidates:
    """Makes one workload's candidates from decisions, and tuning records from their measurements.

    ``prepare`` is all that the asking thread needs of a tuner (:class:`tuner.screening.Preparer`).
    """

    def __init__(self, spec: WorkloadSpec, space, target: dict, constants: set | None = None):
        self.spec = spec
        self.space = space      # a GeneratedSpace or a hand-written KnobSpace
        self.target = target
        # indices of constant inputs (weights): a schedule's packs of them are made once, outside the
        # timed kernel, as a model build makes them (tuner.prepack)
        self.constants = set(constants or ())
        self.meta: dict = {}    # annotations every record of the run carries (e.g. the model task)

    def prepare(self, trial, decisions: dict | None = None, src=None) -> Candidate:
        """The candidate of an Optuna ``trial``, of fixed ``decisions`` or of a decision source ``src``.

        A combination that gives no legal schedule comes back with ``error`` set (see
        :func:`tuner.measure.replay_and_lower`); otherwise with its own loop nest (``nest``) and
        features (``func``, the nest code generation compiles, is made when first used).
        """
        from cost_model import extract_features
        if src is None:
            src = OptunaDecisions(trial) if trial is not None else FixedDecisions(decisions or {})
        cand = Candidate(trial, {})
        cand.schedule, _, cand.nest, cand.error = replay_and_lower(lambda: self.space.apply(src),
                                                                   scheduled_only=True)
        cand.decisions = dict(src.decisions)
        cand.choices = dict(src.choices)
        if cand.nest is not None and self.constants:
            self._prepack(cand)
        if cand.nest is not None:     # features read the schedule's own nest, before codegen's passes
            cand.features = extract_features(cand.nest)
        return cand

    def _prepack(self, cand: Candidate) -> None:
        """Measure ``cand`` with the packs of constant inputs moved out of the kernel (if it packs any)."""
        try:
            pre = prepack(self.spec.tensors(), cand.schedule, self.constants)
        except Exception:  # noqa: BLE001 - a pack this cannot move stays in the kernel
            pre = None
        if pre is None:
            return
        _, _, nest, failure = replay_and_lower(lambda: pre.schedule, scheduled_only=True)
        if failure is None:
            cand.nest, cand.packed = nest, pre

    def default(self) -> Candidate | None:
        """The default schedule as a candidate (decisions ``{}``), or None if it does not lower."""
        from schedules import Schedule
        try:
            schedule = Schedule(self.spec.tensors())
            return Candidate(None, {}, schedule=schedule, lowered=schedule.lower())
        except Exception:  # noqa: BLE001 - the search goes on without it
            return None

    def record(self, cand: Candidate, res: MeasureResult, confirmed: bool = False,
               remeasured: bool = False) -> TuningRecord:
        """The log record of measuring ``cand`` (``res``: its measurement, or its error if invalid)."""
        trace = cand.schedule.to_json() if cand.schedule is not None else {"instructions": [], "decisions": {}}
        trace["decisions"] = dict(cand.decisions)
        return TuningRecord(workload_key=self.spec.key, workload_name=self.spec.name,
                            workload_params=dict(self.spec.params), target=self.target, trace=trace,
                            decisions=dict(cand.decisions), costs=tuple(res.costs), error_kind=res.error_kind,
                            error_msg=res.error_msg, compile_seconds=res.compile_seconds,
                            run_seconds=res.run_seconds, flops=self.spec.flops, confirmed=confirmed,
                            remeasured=remeasured, meta=self._meta(cand))

    def _meta(self, cand: Candidate) -> dict:
        meta = {**self.meta, "origin": self.origin(cand)}
        if cand.packed is not None:     # timed without packing these (a build packs them once)
            meta["prepacked"] = sorted({p.source.name for p in cand.packed.packs})
        return meta

    @staticmethod
    def origin(cand: Candidate) -> str:
        """Who chose ``cand``: the tuner's arm (see :data:`tuner.report.ARMS`), or "default"."""
        return "default" if cand.trial is None and not cand.decisions else cand.origin


def numpy_reference_record(best: TuningRecord, tuned_s: float, numpy_s: float) -> TuningRecord:
    """A repeated measurement of ``best`` (``tuned_s`` seconds per call) that also holds numpy's time for
    the workload (``numpy_s``), both timed side by side in one process when a tuning run ends: the log
    keeps the comparison (``meta["numpy_seconds"]``) for reports."""
    return dataclasses.replace(best, costs=(float(tuned_s),), confirmed=False, remeasured=True,
                               compile_seconds=0.0, run_seconds=0.0, timestamp=utc_now(),
                               meta={**best.meta, "numpy_seconds": float(numpy_s)})
