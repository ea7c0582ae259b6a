"""Refresh the nbval references of study notebooks: the stored outputs of their cells tagged
`nbval-check-output`, which `make test` compares (nbval, `--nbval-lax`, sanitized by
notebooks/nbval_sanitize.cfg).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/nbval_references.py notebooks/00_derivation_checks.ipynb ...

Each notebook is executed as nbval executes it — a copy, with its parameters cell's defaults, in its own
folder, on the kernel of this Python — and the outputs of its marked cells are written into the notebook
file, text only (scripts/nbclean.py); every other cell stays without outputs. Notebooks 40 and 45 read the
smoke runs that notebook 10 trains when `make test` runs the folder in order: train them first (run
notebook 10, or `make test`) so that their references show what nbval sees there.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("nbclean", Path(__file__).resolve().with_name("nbclean.py"))
nbclean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbclean)


def executed(nb: dict, folder: Path) -> dict:
    """A copy of the notebook (a JSON dict) run top to bottom in `folder` on this Python's kernel."""
    import nbformat
    from nbclient import NotebookClient

    run = nbformat.reads(json.dumps(nb), as_version=4)
    NotebookClient(run, timeout=None, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return json.loads(nbformat.writes(run))


def refresh(path: Path) -> bool:
    """Write the marked cells' outputs of a fresh run into the notebook at `path`; True if it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    outputs = {cell["id"]: cell for cell in executed(nb, path.resolve().parent)["cells"] if nbclean.is_checked(cell)}
    for cell in nb["cells"]:
        if nbclean.is_checked(cell):
            cell["outputs"] = outputs[cell["id"]]["outputs"]
            cell["execution_count"] = outputs[cell["id"]]["execution_count"]
    refreshed = nbclean.dumps(nbclean.strip(nb))
    if refreshed != text:
        path.write_text(refreshed, encoding="utf-8")
    return refreshed != text


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip())
        return 2
    for name in argv:
        marked = sum(nbclean.is_checked(c) for c in json.loads(Path(name).read_text(encoding="utf-8"))["cells"])
        changed = refresh(Path(name))
        print(f"{name}: {marked} marked cells, references {'updated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
