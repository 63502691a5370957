"""Report files (--json, --junit, --html) are checked before any work, not after it.

Why: a path checked only when the report is written loses the whole run (a 30 s check, a 20 min bisect)
to a folder that does not exist yet, the usual CI case. So every output path is validated up front: its
folder is created, a directory or an unwritable place is a usage error (exit 2, one line).
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """An output path that cannot be written (exit 2, before any work)."""


# argparse dest -> the option's name, for every subcommand that writes a file
OUTPUT_OPTIONS: dict[str, str] = {"json_path": "--json", "json": "--json", "junit": "--junit", "html": "--html"}


def prepare_output(path: str | os.PathLike, option: str) -> Path:
    """Create the folder of `path` and make sure a file can be written there. Returns the path."""
    p = Path(path)
    if str(path) == "" or p.is_dir() or str(path).endswith(("/", os.sep)):
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
    for dest, option in OUTPUT_OPTIONS.items():
        path = getattr(args, dest, None)
        if not path or not isinstance(path, (str, os.PathLike)):
            continue
        resolved = prepare_output(path, option).resolve()
        if resolved in seen:
            raise OutputPathError(f"{option} and {seen[resolved]} both name {path}; give each its own file")
        seen[resolved] = option
