"""tensortune: tuner."""
