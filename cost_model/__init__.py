"""tensortune: cost_model."""
