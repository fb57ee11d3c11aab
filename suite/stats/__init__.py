"""Stage 7, stats: everything that turns trial records into numbers, per (task, size,
setting): spread and its intervals, variance components, expected maximum, gaps to reported
results, comparisons of studies and recipes, per-example outcomes. Takes records; gives summaries."""
