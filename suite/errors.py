"""User-facing errors: one line that names the file, field or trial; the CLI exits with 2."""

import sys


class SuiteError(Exception):
    """A problem with the user's input (spec, data, model, flags)."""

    exit_code = 2


class SpecError(SuiteError):
    """A task or sweep YAML that does not match its schema."""


class DataError(SuiteError):
    """A missing or malformed data file, or a label the spec does not know."""


class ModelError(SuiteError):
    """A model name that is neither an alias, a local folder nor reachable on the hub."""


class TrialDiverged(RuntimeError):
    """Raised inside a trial when the loss stops being finite; recorded as a failed run."""


def report(err: SuiteError) -> int:
    """How every command ends on a user error: its one line on stderr; returns its exit code."""
    print(f"error: {err}", file=sys.stderr)
    return err.exit_code
