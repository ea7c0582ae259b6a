"""The nbval references of the study notebooks, and the copies nbval runs.

A cell tagged `nbval-check-output` is compared by `make test` (nbval, `--nbval-lax`, sanitized by
notebooks/nbval_sanitize.cfg) with its reference: its text outputs from a run with the notebook's
defaults, kept in tests/nbval_references/<notebook>.json ({cell id: outputs}) so that notebooks/ stays
output-free (scripts/nbclean.py).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/nbval_references.py notebooks/00_derivation_checks.ipynb ...
        run each notebook as nbval runs it (a copy, with its parameters cell's defaults, in its own folder,
        on the kernel of this Python) and write its marked cells' outputs as its references;
    .venv/bin/python scripts/nbval_references.py --into .nbval
        write every notebook of notebooks/ into that folder (replacing the notebooks there) with its
        references in its marked cells: what `make test` runs nbval on (scripts/test_side_by_side.sh).

Notebooks 40 and 45 read the smoke runs that notebook 10 trains when `make test` runs the folder in order:
train them first (run notebook 10, or `make test`) so that their references show what nbval sees there.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("nbclean", Path(__file__).resolve().with_name("nbclean.py"))
nbclean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbclean)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
REFERENCES = ROOT / "tests" / "nbval_references"


def reference_path(notebook: Path) -> Path:
    """Where the references of `notebook` are kept: tests/nbval_references/<its name>.json."""
    return REFERENCES / f"{Path(notebook).stem}.json"


def references(notebook: Path) -> dict[str, list[dict]]:
    """{cell id: text outputs} kept for the notebook's marked cells ({} if none are kept)."""
    path = reference_path(notebook)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def with_references(nb: dict, kept: dict[str, list[dict]], name: str = "notebook") -> dict:
    """The notebook (a JSON dict, in place) with each marked cell's reference as its outputs (execution
    count 1, so nbval compares it); a marked cell without one is an error, not a cell nbval skips."""
    for cell in nb["cells"]:
        if nbclean.is_checked(cell):
            if cell.get("id") not in kept:
                raise SystemExit(
                    f"error: {name}: cell {cell.get('id')} is tagged {nbclean.CHECKED} but has no reference "
                    f"(`python scripts/nbval_references.py {name}` writes its references)"
                )
            cell["outputs"], cell["execution_count"] = kept[cell["id"]], nbclean.REFERENCE_COUNT
    return nb


def write_checked_copies(folder: Path) -> list[Path]:
    """Every notebook of notebooks/ written into `folder` with its references, replacing the notebooks there
    (a stale one too): nbval's input. notebooks/ itself is refused."""
    folder = Path(folder)
    if folder.resolve() == NOTEBOOKS.resolve():
        raise SystemExit("error: the copies with references go beside notebooks/, never into it (e.g. --into .nbval)")
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.ipynb"):
        stale.unlink()
    written = []
    for source in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(source.read_text(encoding="utf-8"))
        name = str(source.relative_to(ROOT))
        written.append(folder / source.name)
        written[-1].write_text(nbclean.dumps(with_references(nb, references(source), name)), encoding="utf-8")
    return written


def executed(nb: dict, folder: Path) -> dict:
    """A copy of the notebook (a JSON dict) run top to bottom in `folder` on this Python's kernel."""
    import nbformat
    from nbclient import NotebookClient

    run = nbformat.reads(json.dumps(nb), as_version=4)
    NotebookClient(run, timeout=None, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return json.loads(nbformat.writes(run))


def refresh(path: Path) -> bool:
    """Write the marked cells' text outputs of a fresh run of the notebook at `path` as its references;
    True if they changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    kept = {
        cell["id"]: nbclean.text_outputs(cell["outputs"])
        for cell in executed(nb, path.resolve().parent)["cells"]
        if nbclean.is_checked(cell)
    }
    target = reference_path(path)
    text = json.dumps(kept, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    if not kept:
        changed = target.is_file()
        target.unlink(missing_ok=True)
        return changed
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    if argv[:1] == ["--into"] and len(argv) == 2:
        written = write_checked_copies(Path(argv[1]))
        print(f"{len(written)} notebooks with their nbval references → {argv[1]}/")
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip())
        return 2
    for name in argv:
        changed = refresh(Path(name))
        print(f"{name}: {len(references(Path(name)))} references ({'updated' if changed else 'unchanged'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
