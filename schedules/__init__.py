"""tensortune schedules: the schedule trace, its primitives and search spaces."""
from tensorir.errors import *  # noqa: F401,F403  (ScheduleError and its subclasses)
from tensorir.errors import ScheduleError  # noqa: F401

from .schedule import Instruction, Schedule, describe  # noqa: F401
