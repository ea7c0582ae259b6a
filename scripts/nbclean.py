"""Keep the study notebooks stored clean: no outputs, execution counts or run metadata.

A code cell tagged `nbval-check-output` (nbval's tag) is one whose outputs `make test` compares with a
reference (`--nbval-lax`). The references are not kept in the notebooks: they live in
tests/nbval_references/<notebook>.json, text only (`text_outputs`), made by `scripts/nbval_references.py`,
which also writes the copies nbval runs (each notebook with its references) into .nbval/.

Three ways in, one rule (`strip`); the sources, tags and the user's own metadata stay as they are:
  - JupyterLab (`make lab`): `.jupyter/jupyter_server_config.py` installs `pre_save_hook`, so a
    notebook under a `notebooks/` folder is saved without what running it produced;
  - git: `make install` sets this file as the clean filter of `notebooks/*.ipynb` (`.gitattributes`),
    so `git status` and `git add` see a notebook as it would be saved here (stdin → stdout);
  - by hand: `python scripts/nbclean.py notebooks/*.ipynb` cleans files in place.
Standard library only: git runs it on every changed notebook, and without importing rpevit (torch)
it takes a few milliseconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CELL_RUN_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled", "papermill")
NOTEBOOK_RUN_METADATA = ("widgets", "papermill")
CHECKED = "nbval-check-output"  # nbval's tag: the cell's outputs are compared with its reference
REFERENCE_COUNT = 1  # the execution count a reference is given (any number but null: nbval skips unrun cells)


def is_checked(cell: dict) -> bool:
    """A code cell whose outputs nbval compares with its reference (tagged `nbval-check-output`)."""
    tags = cell.get("metadata", {}).get("tags", [])
    return cell.get("cell_type") == "code" and isinstance(tags, list) and CHECKED in tags


def text_outputs(outputs: list[dict]) -> list[dict]:
    """The outputs a reference keeps: streams, and the text/* data of displays and results (what
    nbval compares; images and widget views it skips). Errors, metadata and counts go."""
    kept = []
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            kept.append({"name": output.get("name", "stdout"), "output_type": kind, "text": output.get("text", "")})
        elif kind in ("display_data", "execute_result"):
            data = {key: value for key, value in output.get("data", {}).items() if key.startswith("text/")}
            if data:
                kept.append({"data": data, "metadata": {}, "output_type": kind})
                if kind == "execute_result":
                    kept[-1]["execution_count"] = REFERENCE_COUNT
    return kept


def strip(nb: dict) -> dict:
    """Remove outputs, execution counts and run metadata from a notebook (a JSON dict), in place:
    per cell Lab's timings, output collapse/scroll state, papermill's fields and empty tags; per notebook the
    widget state, papermill's fields and the kernel's language details (its `name` stays)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        metadata = cell.get("metadata", {})
        for key in CELL_RUN_METADATA:
            metadata.pop(key, None)
        if metadata.get("tags") == []:  # papermill adds an empty list to every cell
            metadata.pop("tags")
        view = metadata.get("jupyter")
        if isinstance(view, dict):
            view.pop("outputs_hidden", None)
            if not view:
                metadata.pop("jupyter")
    metadata = nb.get("metadata", {})
    for key in NOTEBOOK_RUN_METADATA:
        metadata.pop(key, None)
    language = metadata.get("language_info")
    if isinstance(language, dict) and "name" in language:
        metadata["language_info"] = {"name": language["name"]}
    return nb


def dumps(nb: dict) -> str:
    """A notebook's text as nbformat (and so JupyterLab) writes it."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def clean_text(text: str) -> str:
    """The cleaned notebook text; text that is not a notebook is returned unchanged."""
    try:
        nb = json.loads(text)
    except ValueError:
        return text
    return dumps(strip(nb)) if isinstance(nb, dict) and "cells" in nb else text


def pre_save_hook(model: dict, path: str, contents_manager, **kwargs) -> None:
    """jupyter_server's FileContentsManager.pre_save_hook: clean a notebook saved under a `notebooks/`
    folder (`path` is relative to the server's root); other files are saved as they are."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    if (Path(getattr(contents_manager, "root_dir", ".")) / path).resolve().parent.name == "notebooks":
        strip(model["content"])


def main(argv: list[str]) -> int:
    """No arguments: filter stdin to stdout (git's clean filter); else clean the named files in place."""
    if not argv:
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
        sys.stdout.buffer.write(clean_text(text).encode("utf-8", "surrogateescape"))
        return 0
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        cleaned = clean_text(text)
        if cleaned != text:
            path.write_text(cleaned, encoding="utf-8")
            print(f"cleaned {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
