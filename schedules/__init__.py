"""tensortune schedules: the schedule trace, its primitives and search spaces."""
from schedules.errors import *  # noqa: F401,F403  (ScheduleError and its subclasses)
from schedules.errors import ScheduleError  # noqa: F401

from .schedule import Instruction, Schedule, describe  # noqa: F401
