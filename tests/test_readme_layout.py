"""The README's layout section is checked against the tree: every path it names exists, and every room of the
package, every module at the package's root and every top-level folder of the repository is named there, so
the plan a newcomer reads is the one on disk."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Layout")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _named() -> set[str]:
    return {p.rstrip("/") for p in re.findall(r"`([\w./-]+)`", _layout()) if "/" in p or p.endswith(".py")}


def test_every_path_the_layout_names_exists():
    missing = sorted(p for p in _named() if not (ROOT / p).exists())
    assert missing == []


def test_every_room_root_module_and_top_folder_is_named():
    named = _named()
    rooms = {f"fusecheck/{p.name}" for p in (ROOT / "fusecheck").iterdir() if (p / "__init__.py").exists()}
    modules = {f"fusecheck/{p.name}" for p in (ROOT / "fusecheck").glob("*.py")
               if p.name not in {"__init__.py", "__main__.py"}}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))
               and p.name not in {"fusecheck", "build"} and not p.name.endswith(".egg-info")}
    assert sorted((rooms | modules | folders) - named) == []


def test_the_check_sees_a_path_that_is_not_there():
    # the detector itself: a name the tree lacks is reported (the tests above would pass vacuously otherwise)
    assert not (ROOT / "fusecheck/no_such_room").exists() and "fusecheck/check" in _named()
