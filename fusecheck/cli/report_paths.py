"""Report files (--json, --junit, --html) are checked before any work, not after it.

Why: a path checked only when the report is written loses the whole run (a 30 s check, a 20 min bisect)
to a folder that does not exist yet, the usual CI case. So every output path is validated up front: its
folder is created, a directory or an unwritable place is a usage error (exit 2, one line). A write that
still fails at the end (a full disk) is exit 3 in one line (`write_reports`), before any verdict is printed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Callable


from fusecheck.errors import OutputPathError, ReportWriteError  # noqa: E402,F401


# argparse dest -> the option's name, for every subcommand that writes a file
OUTPUT_OPTIONS: dict[str, str] = {"json_path": "--json", "json": "--json", "junit": "--junit", "html": "--html",
                                  "repro": "--repro"}
# argparse dest -> what names it, for every input file a report must not overwrite (`file.py:name` refs too);
# not --baseline: `--json B --baseline B` updates a baseline in place, read before it is written
INPUT_OPTIONS: dict[str, str] = {"target": "the target", "targets": "a target", "backend": "--backend",
                                 "policy": "--policy"}


def _input_files(args: argparse.Namespace) -> dict[Path, str]:
    """The files the command line reads: a `path.py:name` reference counts by its file."""
    out: dict[Path, str] = {}
    for dest, what in INPUT_OPTIONS.items():
        values = getattr(args, dest, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str) or not value:
                continue
            for candidate in (value, value.rpartition(":")[0]):
                if candidate and Path(candidate).is_file():
                    out[Path(candidate).resolve()] = f"{what} {value}"
    return out


def prepare_output(path: str | os.PathLike, option: str) -> Path:
    """Create the folder of `path` and make sure a file can be written there. Returns the path."""
    p = Path(path)
    if str(path) == "":
        raise OutputPathError(f"{option} '': an empty path; name a file")
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        raise OutputPathError(f"{option} {path}: is a directory; name a file in it")
    folder = p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"{option} {path}: cannot create the folder {folder} ({exc.strerror or exc})") from exc
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputPathError(f"{option} {path}: the file is not writable")
    try:  # a real write: os.access says yes to root on read-only mounts and to /proc
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fusecheck-probe-"):
            pass
    except OSError as exc:
        raise OutputPathError(f"{option} {path}: cannot write in {folder} ({exc.strerror or exc})") from exc
    return p


def prepare_outputs(args: argparse.Namespace) -> None:
    """Validate every output path the parsed command line names; two outputs may not share a file."""
    seen: dict[Path, str] = {}
    inputs = _input_files(args)
    for dest, option in OUTPUT_OPTIONS.items():
        path = getattr(args, dest, None)
        if path is None or not isinstance(path, (str, os.PathLike)):
            continue
        resolved = prepare_output(path, option).resolve()
        if resolved in seen:
            raise OutputPathError(f"{option} and {seen[resolved]} both name {path}; give each its own file")
        if resolved in inputs:
            raise OutputPathError(f"{option} {path} is {inputs[resolved]}: the report would overwrite an input "
                                  "of this run; give it its own file")
        seen[resolved] = option




def write_reports(writers: list[tuple[str, object, Callable[[], object]]], verdict: str = "") -> None:
    """Run each `(option, path, write)` for the paths given (a falsy path is skipped); every writer is tried.
    A failed one raises ReportWriteError naming each option, file and OS error, and `verdict` (what the run
    found, so the work is not lost): `--json /dev/full: cannot write the report (No space left on device)`."""
    failed = []
    for option, path, write in writers:
        if not path:
            continue
        try:
            write()
        except OSError as exc:
            failed.append(f"{option} {path}: cannot write the report ({exc.strerror or exc})")
    if failed:
        found = f"; the run's verdict was {verdict}, but it ends with exit 3 as a report is missing" if verdict else ""
        raise ReportWriteError("; ".join(failed) + found)
