"""Head registry: for each `head:` name in a task spec, its data and its LightningModule."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import DataCollatorWithPadding, PreTrainedModel

from suite.data.classification import ClassificationData
from suite.errors import SpecError
from suite.heads.base import EncoderModule
from suite.heads.classification import ClassificationModule
from suite.metrics import trivial_baseline
from suite.spec import HParams, TaskSpec


@dataclass
class PreparedTask:
    """Everything a trial needs that does not change between trials of one study."""

    spec: TaskSpec
    data: Any
    tokenizer: Any
    collate: Any
    baseline: dict[str, float]

    def build_module(self, encoder: PreTrainedModel, hparams: HParams) -> EncoderModule:
        spec = self.spec
        return ClassificationModule(
            encoder,
            hparams,
            self.data.num_labels,
            [spec.metric.main, *spec.metric.extra],
            regression=spec.regression,
        )


def prepare_task(spec: TaskSpec, root: Path | None, tokenizer: Any) -> PreparedTask:
    if spec.head != "classification":
        raise SpecError(f"task {spec.name}: field 'head': {spec.head!r} is not available yet")
    data = ClassificationData(spec, root, tokenizer)
    dev = data.labels["validation"][data.dev_indices()]
    names = [spec.metric.main, *spec.metric.extra]
    baseline = trivial_baseline(names, data.labels["train"], dev, spec.regression)
    return PreparedTask(spec, data, tokenizer, DataCollatorWithPadding(tokenizer), baseline)
