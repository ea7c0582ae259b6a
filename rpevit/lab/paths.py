"""Names that become paths: a safe alphabet, and every path built from them kept inside its root."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import UserError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")


def check_name(kind: str, name) -> str:
    """`name` if it is a plain name (letters, digits, `_ . + -`, not starting with a dot), else UserError."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise UserError(
            f"{kind} name {name!r} is not a plain name: use letters, digits and _ . + - "
            "(at most 100, not starting with a dot or containing a slash); it becomes a directory name."
        )
    return name


def inside(root, *names: str, kind: str = "name") -> Path:
    """root/names…, each name checked, the resolved result checked to stay inside the resolved root."""
    root = Path(root)
    path = root.joinpath(*(check_name(kind, n) for n in names))
    if not path.resolve().is_relative_to(root.resolve()):
        raise UserError(f"{path} leaves its root {root} (a symbolic link?); refusing to write there.")
    return path
