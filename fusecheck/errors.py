"""Every user-facing exception of fusecheck, with its exit code, and the one mapping from an exception to an
exit code (the CLI, a sharded rank and the pytest plugin use it).

- `UserError` (exit 2): the user's input is wrong; one line, no traceback.
- `ToolError` (exit 3): the tool or the compiler broke; one line (the message says what and where).
- anything else (exit 3): a bug of fusecheck's or torch's; the traceback is printed.

torch-free: the CLI maps errors without loading torch.
"""
from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class FusecheckError(Exception):
    exit_code = EXIT_ERROR


class UserError(FusecheckError, ValueError):
    """Bad usage or bad input (exit 2)."""
    exit_code = EXIT_USAGE


class ToolError(FusecheckError, RuntimeError):
    """The tool or the compiler broke; no verdict is possible (exit 3)."""
    exit_code = EXIT_ERROR


class TargetError(UserError):
    """The target cannot be loaded or checked as given (unknown file, fails in eager, no tensors...)."""


class NoTensorsReturned(TargetError):
    """A run returned no tensor or number. From eager: the target's mistake; from a compiled run (eager ran
    first and returned some): the backend's."""


class PolicyError(UserError):
    """A policy file is malformed or loosens a default without a reason."""


class ToggleError(UserError):
    """A toggle name is unknown, or the toggles cannot be applied in this context."""


class ToggleUnsupported(ToggleError):
    """The installed torch lacks what a toggle needs; the message names the attribute and the version."""


class BaselineError(UserError):
    """The baseline file is missing or is not a `fusecheck check --json` report."""


class OutputPathError(UserError):
    """An output path that cannot be written (checked before any work)."""


class CompileError(ToolError):
    """The backend failed to compile or run the target (a tool/compiler error, not a verdict)."""


class GoldenError(ToolError):
    """The golden run failed although eager ran (no verdict is possible)."""


class OutOfMemory(ToolError):
    """A phase ran out of memory (one line: the phase, what it needed and had, what helps)."""


class ReportWriteError(ToolError):
    """A report that could not be written once the run had its verdict (the disk filled up, the file went
    away): one line naming the file and the OS error; the verdict is never printed as if the report existed."""


def exit_code(exc: BaseException) -> int:
    """The exit code an exception ends a command with."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return exc.exit_code if isinstance(exc, FusecheckError) else EXIT_ERROR


def is_usage(exc: BaseException) -> bool:
    return exit_code(exc) == EXIT_USAGE


def message(exc: BaseException) -> str:
    """The one line an error is reported with: a user's mistake and OOM as they say it, others with their type."""
    if isinstance(exc, (UserError, OutOfMemory, ReportWriteError)):
        return f"fusecheck: error: {exc}"
    return f"fusecheck: error: {type(exc).__name__}: {exc}"


def wants_traceback(exc: BaseException) -> bool:
    """Only an error fusecheck did not expect (a bug here or in torch) prints its traceback."""
    return not isinstance(exc, FusecheckError)
