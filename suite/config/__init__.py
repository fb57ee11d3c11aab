"""Stage 1, config: the task and sweep schemas, reading their YAML (profiles, `--set`), the shipped
tasks and sweeps, and the typed request a command line becomes. Takes files and arguments; gives
validated `TaskSpec`, `SweepSpec` and `Request` objects. Imports nothing from a later stage."""
