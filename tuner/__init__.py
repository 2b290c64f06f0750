"""tensortune: tuner.

- ``search``: :class:`~tuner.search.Tuner` (``run``; ``start`` / ``step`` / ``finish``), ``drive`` for several
- ``screening``: which asks a round measures, and the thread that asks them
- ``callbacks``: what follows each round (log, cost model, remeasuring, progress)
- ``candidates``, ``state``, ``study``, ``transfer``: candidates and records, the run's estimates,
  the Optuna study, cost-model transfer
- ``measure``, ``worker``, ``compare``, ``layout``: measurement in worker processes, side-by-side timing
- ``spec``, ``target``, ``text``: the workload, the machine, one-line messages
- ``cli``, ``report``: the command line, and the report it prints
"""
