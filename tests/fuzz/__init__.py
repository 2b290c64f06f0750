"""A schedule fuzzer: workloads, a random schedule drawer and a checker.

No pytest dependency at import: ``tests/test_fuzz.py`` (hypothesis property test) and
``benchmarks/fuzz_schedules.py`` (the long run, in worker processes) both use it.

Only the public API is used: ``tensorir.te``, ``tensorir.evaluate.evaluate``, ``schedules.Schedule``
(its primitives, ``stages``, ``loops``, ``extent``, ``reduce_axes``, ``describe``, ``lower``,
``build``, ``to_json``/``from_json``/``to_python``) and the kernel ``build()`` returns.

A *case* is a workload plus a list of *calls*, each a ``Schedule`` method applied to the current
schedule (``{"op": "split", "args": [...], "kwargs": {...}}``, JSON-encoded by
:func:`tests.fuzz.calls.encode`), ``{"op": "from_json", ...}`` (replace the schedule by a replayed,
often malformed, trace) or ``{"op": "$revert"}`` (go back to the last schedule that lowered).  Calls
are drawn one at a time against the schedule as it is (its current stages and loops), and every call
either returns a new ``Schedule`` or raises a one-line ``ScheduleError``; the case goes on from the
last good schedule.  Replaying a case's calls (:func:`tests.fuzz.cases.replay_calls`) rebuilds it
exactly, so a finding is reproduced by its workload name and its calls.

The modules, in the order a case goes through them:

- ``outcomes``: the outcome categories, ``Finding``/``Outcome`` and how errors are described;
- ``workloads``: the named workloads and their random inputs;
- ``calls``: calls encoded as JSON, applied to a schedule, printed as Python;
- ``drawer`` (with ``draw_primitives``, ``recipes`` and ``malformed_traces``): the random calls;
- ``run``: applies calls one by one from the last good schedule, recording findings;
- ``sentinels`` and ``check``: lower, replay, build and run a schedule on fenced arrays;
- ``cases``: a drawn or replayed case from start to result, and minimizing it;
- ``reproducer``: a case as Python that rebuilds it, and as a report;
- ``worker`` and ``pool``: cases in isolated worker processes (crash and hang records).

Outcome categories (``outcomes.CATEGORIES``): ``ok`` and ``refused`` are fine, the others are failures:

- ``bad_error``: a primitive, ``lower``, ``build`` or the kernel call raised something other than
  a ``ScheduleError`` whose message is one line;
- ``late_refusal``: a primitive was accepted, the schedule before it lowered, the one after it does
  not, and the lowering error blames an earlier primitive (e.g. ``compute_at``), i.e. the accepted
  primitive broke an invariant instead of refusing;
- ``wrong``: the output differs from ``tensorir.evaluate.evaluate`` beyond the dtype's tolerance, or a
  second call (outputs poisoned with other values) does not give the same bits;
- ``oob``: the kernel wrote outside an array (every array sits in the middle of a bigger buffer
  filled with a sentinel) or changed an input;
- ``replay_json`` / ``replay_python``: ``from_json(to_json())`` / ``exec(to_python())`` does not
  rebuild the same loop nest;
- ``too_big``: the loop nest allocates more than the in-process limit, so it was not run;
- ``oom``: a clean one-line ``MemoryError`` from build or the kernel call: a failure in-process (where
  nothing may allocate that much), accepted in the long run (``LONG_RUN_ACCEPTABLE``), whose huge
  buffers may legitimately not fit under its memory limit;
- ``crash`` / ``hang``: only the long run's worker processes can observe them.
"""
