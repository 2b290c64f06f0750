"""tensortune: logs."""
