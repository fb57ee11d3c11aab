"""Stage 2, data: read task files (local TSV/CSV/JSONL/CoNLL/SQuAD or a hub dataset), draw seeded
small-data subsamples, tokenize once into cached features and batch them. Takes a `TaskSpec` and
a data folder; gives features and a LightningDataModule."""
