"""The check pipeline: `run_check(case, CheckOptions(...))` -> `CheckReport`.

Stages, shared by the single-process check (single.py), a sharded rank (fusecheck/sharded/check.py) and
the bisect objective: eager x2 (eager.py), compiled x2 with every run judged and the choices at discrete
decisions (compiled.py), the golden with its fallback and per-block replays (golden.py), the last rows and
the notes (judge.py). What differs between callers (how the target runs once, how it compiles, how the
golden runs) is handed to the stages through a `Pipeline` (pipeline.py).
"""
from fusecheck.check.options import GOLDEN_CHOICES, CheckOptions
from fusecheck.check.report import CheckReport, rows_exit_code
from fusecheck.check.single import report_dtype, run_check
from fusecheck.errors import CompileError

__all__ = ["CheckOptions", "CheckReport", "CompileError", "GOLDEN_CHOICES", "report_dtype", "rows_exit_code",
           "run_check"]
