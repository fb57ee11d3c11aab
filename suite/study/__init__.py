"""Stage 6, study: resuming a study by its identity (`suite.identity`), pre-flight checks, the setup
every command shares, the trial queue in an Optuna storage, the worker loop and the records it stores. Takes a
request; gives a stored study whose every trial is kept."""
