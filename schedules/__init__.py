"""tensortune: schedules."""
