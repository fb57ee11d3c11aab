"""Stage 8, outputs: the leaderboard JSON (schema-checked), the variance report notebook, its
figures and the static site. Takes run folders and summaries; gives files for people to read."""
