"""Stage 5, training: one trial (seeded fine-tuning run of a head over a subsample, scored on the
dev set) and replicate groups trained together. Takes a prepared task, a model and a trial plan;
gives one record per trial."""
