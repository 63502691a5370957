"""Moved: the check pipeline lives in fusecheck/check/ (`from fusecheck.check import run_check`). This name
stays for code written against it."""
from fusecheck.check import CheckOptions, CheckReport, CompileError, report_dtype, run_check  # noqa: F401
from fusecheck.check.options import GOLDEN_CHOICES  # noqa: F401
