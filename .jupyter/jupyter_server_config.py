"""JupyterLab on this project (`make lab` puts this folder on JUPYTER_CONFIG_PATH): a notebook
saved under notebooks/ is saved without outputs, execution counts or run metadata
(scripts/nbclean.py), so running the study notebooks leaves `git status` clean. The references that
`make test` compares its cells tagged `nbval-check-output` with are kept apart, in tests/nbval_references/
(scripts/nbval_references.py makes them): a run in Lab, with any parameters, changes none."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "rpevit_nbclean", Path(__file__).resolve().parents[1] / "scripts" / "nbclean.py"
)
_nbclean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_nbclean)
c.FileContentsManager.pre_save_hook = _nbclean.pre_save_hook  # noqa: F821 (`c`: the config jupyter provides)
