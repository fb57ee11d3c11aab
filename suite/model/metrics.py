"""Dev-set metrics on their natural scale: scores in [0, 1], correlations in [-1, 1].

Tables and the gap to reported numbers multiply by 100, as papers print them.

Classification metrics come from scikit-learn and scipy; the names a spec may ask for per head
are listed in `suite.config.task.METRICS_BY_HEAD` (a test keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Metric = Callable[[np.ndarray, np.ndarray], float]


def _sk() -> Any:
    """scikit-learn's metrics, imported at first use: a process that scores no class (QA) never
    loads scikit-learn (~70 MB resident)."""
    from sklearn import metrics

    return metrics


def _stats() -> Any:
    """scipy.stats at first use (~1 s to import): only regression scores need it."""
    from scipy import stats

    return stats


def _pearson(y: np.ndarray, p: np.ndarray) -> float:
    return 0.0 if np.std(p) == 0 or np.std(y) == 0 else float(_stats().pearsonr(y, p)[0])


def _spearman(y: np.ndarray, p: np.ndarray) -> float:
    return 0.0 if np.std(p) == 0 or np.std(y) == 0 else float(_stats().spearmanr(y, p)[0])


CLASSIFICATION: dict[str, Metric] = {
    "accuracy": lambda y, p: _sk().accuracy_score(y, p),
    "matthews": lambda y, p: _sk().matthews_corrcoef(y, p),
}
REGRESSION: dict[str, Metric] = {"pearson": _pearson, "spearman": _spearman}


def _f1(num_labels: int) -> Metric:
    """Binary F1 of the positive class (label index 1) for a two-class spec, as GLUE reports
    MRPC; macro F1 over the spec's classes otherwise. Decided by the spec, never by the labels a
    run happens to predict."""
    if num_labels == 2:
        return lambda y, p: _sk().f1_score(y, p, average="binary", zero_division=0)
    return lambda y, p: _sk().f1_score(y, p, average="macro", labels=list(range(num_labels)), zero_division=0)


def classification_scores(
    names: Sequence[str], labels: np.ndarray, predictions: np.ndarray, num_labels: int = 2
) -> dict[str, float]:
    """A regression head passes continuous predictions."""
    table = {**CLASSIFICATION, **REGRESSION, "f1": _f1(num_labels)}
    return {name: float(table[name](labels, predictions)) for name in names}


def trivial_baseline(
    names: Sequence[str], dev_labels: np.ndarray, regression: bool, num_labels: int = 2
) -> dict[str, float]:
    """What a model that ignores its input scores at best (docs/design.md, Outcomes): per metric,
    the best constant prediction on the evaluation set (every class tried; the dev-majority
    class for accuracy, often the positive class for F1). A constant has no correlation, so
    Pearson, Spearman and Matthews are 0."""
    if regression:
        constant = np.full(len(dev_labels), float(np.mean(dev_labels)))
        return classification_scores(names, dev_labels, constant)
    scores = [
        classification_scores(names, dev_labels, np.full(len(dev_labels), c), num_labels)
        for c in range(num_labels)
    ]
    return {name: max(s[name] for s in scores) for name in names}


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level micro scores by seqeval: the conlleval-compatible default (`entity_f1`,
    `precision`, `recall`), the strict IOB2 mode (`entity_f1_strict`), and F1 per type."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    scores = {
        "entity_f1": f1_score(gold, predicted, zero_division=0),
        "precision": precision_score(gold, predicted, zero_division=0),
        "recall": recall_score(gold, predicted, zero_division=0),
        "entity_f1_strict": f1_score(gold, predicted, mode="strict", scheme=IOB2, zero_division=0),
    }
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    for name, row in report.items():
        if not name.endswith(" avg"):
            scores[f"f1_{name}"] = row["f1-score"]
    return {k: float(v) for k, v in scores.items()}


# SQuAD v1.1's official scoring, written from the definition in its evaluate-v1.1.py: answers
# are lower-cased, stripped of punctuation and of the articles a/an/the, whitespace squeezed;
# EM and token-overlap F1 take the best gold answer. Written here (not evaluate/datasets'
# metric) because those fetch the script from the hub at run time, which fails offline.
def normalize_answer(text: str) -> str:
    import re
    import string

    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, gold: str) -> float:
    from collections import Counter

    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_per_question(predictions: list[str], golds: list[list[str]]) -> dict[str, list[float]]:
    """Exact match and F1 of each question, each the max over its gold answers."""
    em = [
        max(float(normalize_answer(p) == normalize_answer(g)) for g in gs)
        for p, gs in zip(predictions, golds, strict=True)
    ]
    f1 = [max(_token_f1(p, g) for g in gs) for p, gs in zip(predictions, golds, strict=True)]
    return {"exact_match": em, "f1": f1}


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict[str, float]:
    """Exact match and F1 in [0, 1], averaged over questions."""
    per = squad_per_question(predictions, golds)
    n = max(len(predictions), 1)
    return {name: sum(values) / n for name, values in per.items()}


def sentence_entity_counts(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, list[int]]:
    """Per sentence: correct, predicted and gold entities (seqeval's default chunking), from
    which entity F1 = 2 correct / (predicted + gold) over any subset of sentences."""
    from seqeval.metrics.sequence_labeling import get_entities

    out: dict[str, list[int]] = {"correct": [], "predicted": [], "gold": []}
    for g, p in zip(gold, predicted, strict=True):
        true, pred = set(get_entities(g)), set(get_entities(p))
        out["correct"].append(len(true & pred))
        out["predicted"].append(len(pred))
        out["gold"].append(len(true))
    return out
