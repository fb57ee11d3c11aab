"""Synthetic studies with known seed designs, shared by the statistics tests."""

from __future__ import annotations

import numpy as np


def grid_records(y: np.ndarray, nested: bool = False) -> list[dict]:
    """y[S, I, O] -> runs of one setting on a crossed init x order grid per subsample seed
    (nested: every subsample seed has its own init and order seeds)."""
    n_s, n_i, n_o = y.shape
    return [
        {
            "score": float(y[s, i, j]),
            "outcome": "succeeded",
            "seeds": {"init": 100 + i + 10 * s * nested, "order": 200 + j + 10 * s * nested, "subsample": s},
            "hparams": {"lr": 1e-5},
            "size": 100,
        }
        for s in range(n_s)
        for i in range(n_i)
        for j in range(n_o)
    ]


def independent_records(y: np.ndarray) -> list[dict]:
    """y[S, R] -> R independent runs (own init and order seed) under each subsample seed."""
    return [
        {"score": float(y[s, r]), "seeds": {"init": r, "order": 50 + r, "subsample": s}, "hparams": {}}
        for s in range(y.shape[0])
        for r in range(y.shape[1])
    ]
