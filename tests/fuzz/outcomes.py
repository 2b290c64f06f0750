"""What a case can come to: the outcome categories, findings, and errors described on one line."""
from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field

from schedules import Schedule

CATEGORIES = ("ok", "refused", "oom", "too_big", "bad_error", "late_refusal", "wrong", "oob",
              "replay_json", "replay_python", "crash", "hang")
ACCEPTABLE = frozenset({"ok", "refused"})
LONG_RUN_ACCEPTABLE = ACCEPTABLE | {"oom"}
# Worst first: a case's category is its worst finding.
SEVERITY = ("crash", "hang", "oob", "wrong", "bad_error", "late_refusal", "replay_json", "replay_python",
            "too_big", "oom", "refused", "ok")


@dataclass
class Finding:
    category: str
    message: str
    call_index: int | None = None      # the call that caused it (None: the final schedule)
    trace: dict | None = None          # trace of the schedule the call was applied to

    def as_dict(self) -> dict:
        return {"category": self.category, "message": self.message, "call_index": self.call_index,
                "trace": self.trace}


@dataclass
class Outcome:
    category: str
    message: str = ""
    findings: list = field(default_factory=list)    # [Finding]
    lowered: str | None = None


def worst(categories) -> str:
    """The most severe of ``categories`` (``ok`` if there are none)."""
    cats = set(categories) or {"ok"}
    return next(c for c in SEVERITY if c in cats)


def one_line(msg: str) -> bool:
    """Whether an error message is one non-empty line (what a ``ScheduleError`` must be)."""
    return bool(msg.strip()) and "\n" not in msg.strip()


def describe_exc(err: BaseException) -> str:
    """``Type: message @ file:line in function`` (where it was raised) on one line."""
    tb = traceback.extract_tb(err.__traceback__)
    where = f" @ {_short(tb[-1].filename)}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    msg = str(err).replace("\n", "\\n")
    if len(msg) > 400:
        msg = msg[:400] + "..."
    return f"{type(err).__name__}: {msg}{where}"


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def safe_trace(s: Schedule):
    """The schedule's trace as plain JSON data, or what stopped it from being serialized."""
    try:
        obj = s.to_json()
        return json.loads(json.dumps(obj, default=repr))
    except Exception as err:  # noqa: BLE001 - recorded, not raised
        return {"unserializable": describe_exc(err)}
