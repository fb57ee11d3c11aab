"""Data: read task files, draw seeded small-data subsamples, tokenize once and cache."""
