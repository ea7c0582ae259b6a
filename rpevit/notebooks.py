"""Execute the numbered study notebooks headless with papermill into reports/<preset>/.

Each notebook's `parameters` cell holds CPU-cheap defaults (the smoke preset); here it receives
the preset's YAML keys (as `papermill -f params/<preset>.yaml` would) plus `name`. A failing
notebook stops the command with the notebook and cell named; the partly executed copy is kept.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import UserError
from .params import PROJECT_ROOT, load_params, preset_path
from .report import report_dir, write_index

NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"


class NotebookFailed(RuntimeError):
    """A notebook raised an error while executing."""


def list_notebooks() -> list[Path]:
    """The numbered notebooks NN_name.ipynb, in order."""
    return sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def notebook_parameters(preset: str) -> dict:
    """The parameters a preset passes to every notebook: its YAML keys, and `name` = the preset
    as given (a name under params/ or a path), which the notebooks hand to load_params."""
    load_params(preset)  # fail here, with one clear message, on a bad preset
    raw = yaml.safe_load(preset_path(preset).read_text()) or {}
    return {**raw, "name": str(preset)}


def execute_notebooks(preset: str, only: list[str] | None = None, kernel: str = "python3",
                      reports_root=None) -> list[Path]:
    """Run the notebooks (all, or those whose names start with an entry of `only`) for a preset."""
    import papermill

    parameters = notebook_parameters(preset)
    name = load_params(preset).name
    out_dir = report_dir(name, reports_root)
    chosen = [nb for nb in list_notebooks() if not only or any(nb.stem.startswith(o) for o in only)]
    if only and not chosen:
        raise UserError(f"no notebook matches {only}; notebooks: {', '.join(nb.stem for nb in list_notebooks())}.")
    done = []
    for notebook in chosen:
        output = out_dir / notebook.name
        print(f"executing {notebook.name} → {output}", flush=True)
        try:
            papermill.execute_notebook(str(notebook), str(output), parameters=parameters, kernel_name=kernel,
                                       cwd=str(PROJECT_ROOT), progress_bar=False)
        except papermill.PapermillExecutionError as exc:
            raise NotebookFailed(f"notebook {notebook.name} failed in cell {exc.exec_count}: {exc.ename}: "
                                 f"{exc.evalue} (partly executed copy: {output})") from None
        done.append(output)
    write_index(name, [nb.name for nb in list_notebooks()], reports_root)
    return done
