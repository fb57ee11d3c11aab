"""Head registry: for each `head:` name in a task spec, its data, collate function, trivial
baseline and LightningModule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import DataCollatorWithPadding, PreTrainedModel

from suite.config.sweep import HParams
from suite.config.task import TaskSpec
from suite.data.classification import ClassificationData
from suite.data.squad import QAData
from suite.data.subsample import regression_strata, subsample_indices
from suite.data.tagging import TaggingData, assemble, collate_tagging
from suite.errors import SpecError
from suite.model import adapters, methods, stabilisers
from suite.model.encoders import draw_missing
from suite.model.metrics import (
    entity_scores,
    sentence_entity_counts,
    squad_per_question,
    squad_scores,
    trivial_baseline,
)
from suite.model.names import default_head

if TYPE_CHECKING:
    from suite.heads.base import EncoderModule

# The head modules (Lightning) are imported where a module is built or a span scored, not here:
# planning (`run --workers N`'s child, `plan`, `validate`) prepares tasks without training, and
# importing Lightning costs each of those processes ~2 s and ~150 MB (benchmarks/RESULTS.md).

# The curve sample's seed: one fixed sample of the evaluation set for every trial (never a trial's seeds).
CURVE_SAMPLE_SEED = 0


@dataclass
class PreparedTask:
    """Everything a trial needs that does not change between trials of one study."""

    spec: TaskSpec
    data: Any
    tokenizer: Any
    collate: Callable | None
    baseline: dict[str, float]
    builder: Callable[[PreparedTask, PreTrainedModel, HParams], EncoderModule] | None = None
    eval_note: Callable[[], dict[str, Any]] | None = None  # what the evaluation set is, per trial
    position: str = "example"  # the dev feature field holding its example's position in the set
    strata: np.ndarray | None = None  # the evaluation set's labels (or target bins), by position

    def build_module(self, encoder: PreTrainedModel, hparams: HParams) -> EncoderModule:
        """The head, then the encoder weights its checkpoint lacked (those the head kept), then the
        stabilisers, then the adapter, all from torch's RNG as the caller seeded it (the init seed):
        the head's weights depend on none of them."""
        module = self.builder(self, encoder, hparams)
        module.drawn_weights = draw_missing(module.encoder)
        stabilisers.apply(module, hparams)
        adapters.apply(module, hparams)
        return module

    def build_trial_module(self, encoder: PreTrainedModel, hparams: HParams, init_seed: int) -> EncoderModule:
        """`build_module`, then the setting's fine-tuning method (if any) built and set up
        (`methods.attach`): what a trial trains and `plan` times. The method's hooks run after the
        head, re-initialisation, freezing and the adapter (docs/methods.md)."""
        if hparams.method is None:
            return self.build_module(encoder, hparams)
        method = methods.build_method(hparams.method, hparams.method_args)
        if found := methods.conflict(method, hparams.method, hparams.model_dump()):
            raise methods.MethodRefused(f"{hparams.method} cannot be combined with {found[0]} {found[1]}")
        hooks = methods.hooks_of(method)
        pretrained = methods.pretrained_state(encoder) if "setup" in hooks else {}
        module = self.build_module(encoder, hparams)
        methods.attach(module, method, pretrained, init_seed)
        return module

    def curve_positions(self) -> np.ndarray | None:
        """The positions in the evaluation set that each epoch's evaluation covers: `curve_sample`
        of them, drawn with a fixed seed (stratified by label where the task has labels), the same
        for every trial; None: the whole set (`full`, or a set no larger)."""
        size, n = self.spec.curve_sample, len(self.data.dev_indices())
        if size == "full" or size >= n:
            return None
        return subsample_indices(n, size, CURVE_SAMPLE_SEED, self.strata)

    def curve_features(self, dev: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], np.ndarray | None]:
        """The evaluation set's features (`dev`) that each epoch evaluates, and their positions
        (None: all of them)."""
        positions = self.curve_positions()
        if positions is None:
            return dev, None
        chosen = set(positions.tolist())
        return [f for f in dev if f[self.position] in chosen], positions


def _classification(spec: TaskSpec, root: Path | None, tokenizer: Any) -> PreparedTask:
    data = ClassificationData(spec, root, tokenizer)
    names = [spec.metric.main, *spec.metric.extra]
    dev = data.labels["dev"][data.dev_indices()]
    baseline = trivial_baseline(names, dev, spec.regression, data.num_labels)
    strata = regression_strata(dev) if spec.regression else dev

    def build(task: PreparedTask, encoder: PreTrainedModel, hparams: HParams) -> EncoderModule:
        classifier = spec.classifier if hparams.classifier == "task" else hparams.classifier
        if classifier == "model":  # a spec used without `study.setup.load_specs` (the API, tests)
            classifier = default_head(encoder.name_or_path)
        from suite.heads.classification import ClassificationModule

        return ClassificationModule(
            encoder, hparams, data.num_labels, names, regression=spec.regression, classifier=classifier
        )

    collate = DataCollatorWithPadding(tokenizer)
    return PreparedTask(spec, data, tokenizer, collate, baseline, build, strata=strata)


Scored = tuple[dict[str, float], dict[str, list]]  # (metrics, per-example outcomes)
Positions = np.ndarray | None  # the positions in the evaluation set evaluated (None: all)


def tagging_scorer(data: TaggingData) -> Callable[[list[tuple[int, int, list[int]]], Positions], Scored]:
    """Window predictions -> word tags per dev sentence -> seqeval entity scores, and each
    sentence's entity counts, over the sentences at `positions` (None: every dev sentence)."""
    indices = data.dev_indices()
    gold = data.gold("dev", indices)

    def score(windows: list[tuple[int, int, list[int]]], positions: Positions = None) -> Scored:
        keep = range(len(gold)) if positions is None else positions.tolist()
        tags = assemble(windows, len(gold))
        predicted = [[data.tags[t] for t in tags[p]] for p in keep]
        scored = [gold[p] for p in keep]
        return entity_scores(scored, predicted), sentence_entity_counts(scored, predicted)

    return score


def _tagging(spec: TaskSpec, root: Path | None, tokenizer: Any) -> PreparedTask:
    data = TaggingData(spec, root, tokenizer)
    # Predicting O everywhere finds no entity: every entity score is 0.
    baseline = {name: 0.0 for name in [spec.metric.main, *spec.metric.extra]}

    def build(task: PreparedTask, encoder: PreTrainedModel, hparams: HParams) -> EncoderModule:
        from suite.heads.tagging import TaggingModule

        return TaggingModule(encoder, hparams, data.tags, tagging_scorer(data), crf=spec.tagging.crf)

    collate = collate_tagging(tokenizer)
    return PreparedTask(spec, data, tokenizer, collate, baseline, build, position="sentence")


def span_scorer(data: QAData) -> Callable[[dict, dict, Positions], Scored]:
    """Window logits (by window number) -> best answer per held-out question -> official SQuAD
    EM/F1, and each question's EM/F1, over the questions at `positions` (None: every one)."""
    windows = data.features("dev", data.dev_indices())
    contexts, golds, qa = [e.context for e in data.dev], data.golds(), data.qa

    def score(start: dict, end: dict, positions: Positions = None) -> Scored:
        from suite.heads.span import best_answers

        keep = range(len(golds)) if positions is None else positions.tolist()
        chosen = set(keep)
        numbers = [w for w, window in enumerate(windows) if window["example"] in chosen]
        found = best_answers(
            [windows[w] for w in numbers],
            contexts,
            dict(enumerate(start[w] for w in numbers)),
            dict(enumerate(end[w] for w in numbers)),
            qa.n_best,
            qa.max_answer_length,
        )
        answers, scored = [found[p] for p in keep], [golds[p] for p in keep]
        return squad_scores(answers, scored), squad_per_question(answers, scored)

    return score


def _span(spec: TaskSpec, root: Path | None, tokenizer: Any) -> PreparedTask:
    data = QAData(spec, root, tokenizer)
    baseline = {name: 0.0 for name in [spec.metric.main, *spec.metric.extra]}  # no answer scores 0

    def build(task: PreparedTask, encoder: PreTrainedModel, hparams: HParams) -> EncoderModule:
        from suite.heads.span import SpanModule

        return SpanModule(encoder, hparams, span_scorer(data))

    def note() -> dict[str, Any]:
        return {
            "label": data.eval_label,
            "questions": len(data.dev),
            "pool": len(data.pool),
            "pool_files": spec.qa.eval_pool,
        }

    from suite.heads.span import collate_span

    # A hub source evaluates its own evaluation split: no note, as for the other heads.
    return PreparedTask(
        spec, data, tokenizer, collate_span(tokenizer), baseline, build, None if data.hub else note
    )


HEADS: dict[str, Callable[[TaskSpec, Path | None, Any], PreparedTask]] = {
    "classification": _classification,
    "tagging": _tagging,
    "span": _span,
}


def prepare_task(spec: TaskSpec, root: Path | None, tokenizer: Any) -> PreparedTask:
    if spec.head not in HEADS:
        raise SpecError(f"task {spec.name}: field 'head': {spec.head!r} is not available yet")
    return HEADS[spec.head](spec, root, tokenizer)
