"""The JupyterLab save hook of this project for any Jupyter server of its virtual environment: `make
install` registers it in .venv/etc/jupyter/jupyter_server_config.json, so a plain `jupyter
lab` (not only `make lab`) saves the project's notebooks/ without outputs, execution counts or run
metadata (scripts/nbclean.py, the same code as git's clean filter; nbval's references are kept apart, in
tests/nbval_references/): Run All and save leave `git status` clean.
Notebooks of other projects opened with the same server are saved as they are."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


@functools.cache
def _nbclean():
    """scripts/nbclean.py of this checkout, loaded as a module."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "nbclean.py"
    spec = importlib.util.spec_from_file_location("rpevit_nbclean", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_project_notebook(target: Path) -> bool:
    """True for a notebook in the notebooks/ folder of an rpevit checkout."""
    return target.parent.name == "notebooks" and (target.parent.parent / "rpevit" / "__init__.py").is_file()


def pre_save_hook(model: dict, path: str, contents_manager, **kwargs) -> None:
    """jupyter_server's FileContentsManager.pre_save_hook (see the module's docstring)."""
    target = (Path(getattr(contents_manager, "root_dir", ".")) / path).resolve()
    if is_project_notebook(target):
        _nbclean().pre_save_hook(model, path, contents_manager, **kwargs)
