"""The suite's default classification head trains like a plain PyTorch loop over Hugging Face's
AutoModelForSequenceClassification (benchmarks/reference_loop.py): same recipe, subsample and
seeds; the two score distributions must agree."""

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.cross_check  # `make cross-check`, a CI step of its own: 10 trainings, ~3 minutes of a core
def test_default_head_lands_inside_the_reference_distribution(shared_data: Path) -> None:
    from scipy import stats

    from benchmarks.reference_loop import reference_score
    from suite.config.sweep import HParams, SeedSpec, seed_grid
    from suite.config.task import TaskSpec, load_task
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan

    spec = load_task(REPO / "tasks/sst2.yaml")
    # The family's reference head (what AutoModelForSequenceClassification builds), not the alias's;
    # scored on 100 dev sentences, the same for both ways (at 200: medians 0.73 and 0.72; at 100,
    # 0.73 and 0.73, p 0.59, for 15% less time); the curve on 32 (the score is the whole 100's).
    overrides = {"eval_limit": 100, "classifier": "auto", "curve_sample": 32}
    spec = TaskSpec.model_validate({**spec.model_dump(), **overrides})
    task = prepare_task(spec, shared_data, load_tokenizer(spec.model))
    # The cheapest regime found where both clearly learn (medians 0.73 and 0.72 at 1 thread): 3 epochs
    # at 2e-4 cost 0.78x 4 epochs at 1e-4 (medians 0.69, 0.675); 3 at 1e-4, or 96 sentences, learn nothing.
    hp, size = HParams(lr=2e-4, batch_size=16, epochs=3), 128
    seeds = list(seed_grid(SeedSpec(repeats=5)))
    ours = [run_trial(task, spec.model, TrialPlan(size, hp, Seeds(*s))) for s in seeds]
    assert {r["head"] for r in ours} == {"auto: BertForSequenceClassification"}
    suite_scores = [r["score"] for r in ours]
    reference = [reference_score(task, spec.model, size, hp, s) for s in seeds]
    print(f"suite {np.round(suite_scores, 3)} reference {np.round(reference, 3)}")  # shown with -s
    assert np.median(reference) > 0.65 and np.median(suite_scores) > 0.65  # both learn SST-2
    assert min(reference) <= np.median(suite_scores) <= max(reference)
    assert stats.mannwhitneyu(suite_scores, reference).pvalue > 0.01  # 5 vs 5: can fail (min p 0.008)
