"""Messages for users and logs: every error the tuner reports is one line."""
from __future__ import annotations


def one_line(text, limit: int = 300) -> str:
    """``text`` (any object) as one line of at most ``limit`` characters: lines joined by ``" | "``."""
    text = " | ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())
    return text if len(text) <= limit else text[:limit - 3] + "..."
