"""tensortune: cost_model (Ansor-style features + xgboost ranking model).

>>> from cost_model import extract_features, CostModel
>>> model = CostModel()
>>> scores = model.predict([extract_features(f) for f in candidates])   # doctest: +SKIP
"""
from .features import (FEATURE_NAMES, FEATURE_VERSION, N_FEATURES, PER_STORE_NAMES, extract_features,
                       extract_features_batch, store_features)
from .metrics import pairwise_accuracy, topk_recall
from .model import CostModel, CostModelConfig, normalize_per_group

__all__ = [
    "FEATURE_NAMES", "FEATURE_VERSION", "N_FEATURES", "PER_STORE_NAMES", "extract_features",
    "extract_features_batch", "store_features",
    "pairwise_accuracy", "topk_recall", "CostModel", "CostModelConfig", "normalize_per_group",
]
