"""``tune-model``'s final check: per task, the tuned kernel or its heuristic start, whichever runs faster
as a step of the model.

The search ranks a task's candidates by their time alone (weights evicted from the caches, decision
031), but in the model a kernel runs between others, its input just written by the step before; the
fastest kernel alone is not always the fastest there (ResNet-18 at one thread: the model of tuned
kernels 26.4 ms, of heuristic starts 24.6 ms, after 512 trials). The check builds the model both ways,
profiles every step in alternating rounds (:meth:`graph.runtime.CompiledModel.profile`) and keeps per
task the kernel whose steps took less (summed over the task's occurrences, median over the rounds); the
start replaces the tuned kernel only when faster by more than ``MARGIN``. Each choice is written to the
log as a ``model_choice`` record (its in-model seconds per occurrence as costs), which builds rank first:
``run``, ``compile`` and ``bench-model`` then use what ran faster in the model
(docs/decisions/045-tune-model-keeps-what-runs-faster-in-the-model.md).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

ROUNDS = 7          # alternating profiles of each model
MARGIN = 0.03       # the start must be this much faster to replace the tuned kernel (decision 036's bar)
PAUSE_S = 0.1       # between the two models' profiles (their threads settle)


@dataclass(frozen=True)
class Choice:
    """One task's verdict: its steps' seconds per model run with either kernel, and which is kept."""
    key: str
    label: str
    tuned_s: float
    start_s: float
    kept: str           # "tuned" or "start"
    tuned_rounds: tuple
    start_rounds: tuple


def differing(plan, tuned: dict, untuned: dict) -> dict:
    """``{key: (start trace, start decisions)}`` for the workloads whose tuned kernel comes from a record
    with other decisions than the heuristic start's (the start computed once, for the records too)."""
    from schedules.decisions import FixedDecisions
    from schedules.space import GeneratedSpace
    out = {}
    for lw in plan.lowered:
        record = getattr(getattr(tuned.get(lw.key), "lookup", None), "record", None)
        if record is None or lw.key in out or lw.key not in untuned:
            continue
        try:
            space = GeneratedSpace(lw.tensors)
            decisions = space.default_decisions()
            trace = space.apply(FixedDecisions(decisions)).to_json()
        except Exception:  # noqa: BLE001 - no start to weigh against: keep the tuned kernel
            continue
        if record.decisions != decisions:
            out[lw.key] = (trace, decisions)
    return out


def choose(plan, tuned: dict, untuned: dict, keys: list, feeds: dict, threads: int | None,
           labels: dict, rounds: int = ROUNDS) -> list:
    """Profile the model built with ``tuned`` and with ``untuned`` kernels (key -> kernel), alternating,
    and return a :class:`Choice` for each of ``keys``."""
    from .model_compile import assemble
    models = {"tuned": assemble(plan, tuned), "start": assemble(plan, untuned)}
    for m in models.values():
        if threads:
            m.threads = threads
    step_keys = [lw.key for lw in plan.lowered]
    wanted = set(keys)
    times = {name: {k: [] for k in keys} for name in models}
    for r in range(rounds):
        for name in (("tuned", "start") if r % 2 == 0 else ("start", "tuned")):
            sums = dict.fromkeys(keys, 0.0)
            for p in models[name].profile(feeds, min_seconds=0.1, min_runs=3):
                if p["step"] < len(step_keys) and step_keys[p["step"]] in wanted:
                    sums[step_keys[p["step"]]] += p["seconds"]
            for k in keys:
                times[name][k].append(sums[k])
            time.sleep(PAUSE_S)
    out = []
    for k in keys:
        t, s = statistics.median(times["tuned"][k]), statistics.median(times["start"][k])
        out.append(Choice(k, labels.get(k, k), t, s, "start" if s < t * (1 - MARGIN) else "tuned",
                          tuple(times["tuned"][k]), tuple(times["start"][k])))
    return out


def choice_records(tuned: dict, choices: list, starts: dict, tasks_by_key: dict, threads: int | None,
                   model: str | None) -> list:
    """The ``model_choice`` records of ``choices``: the kept schedule, its in-model seconds per occurrence
    (``starts``: :func:`differing`'s start traces and decisions)."""
    from logs import TuningRecord
    from logs.apply import current_target
    target = current_target(threads)
    out = []
    for c in choices:
        record = tuned[c.key].lookup.record
        task = tasks_by_key[c.key]
        trace, decisions = (record.trace, record.decisions) if c.kept == "tuned" else starts[c.key]
        rounds = c.tuned_rounds if c.kept == "tuned" else c.start_rounds
        out.append(TuningRecord(
            workload_key=c.key, workload_name=record.workload_name, workload_params=dict(record.workload_params),
            target=target, trace=dict(trace), decisions=dict(decisions), costs=tuple(t / task.weight for t in rounds),
            flops=record.flops, model_choice=True,
            meta={"origin": "model:check", "model": model, "task": task.index, "weight": task.weight,
                  "tuned_seconds": c.tuned_s / task.weight, "start_seconds": c.start_s / task.weight}))
    return out
