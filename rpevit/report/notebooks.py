"""Execute the numbered study notebooks headless with papermill into reports/<preset>/.

Each notebook's `parameters` cell holds CPU-cheap defaults (the smoke preset) and
`report_dir = None` (an interactive run only shows its figures and tables). Here each notebook
receives, of the preset's YAML keys plus `name` (the preset as given) and `report_dir` (the
report folder, relative to the project), only those its parameters cell declares; it writes its
outputs there, replacing those of its previous execution. One line per notebook is printed; the
kernel's own log (its stderr) goes to a file that is shown only when a notebook fails. A cell that
runs longer than the per-cell limit (`cell_timeout`, $RPEVIT_CELL_TIMEOUT, default 900 s; cells
tagged `no-timeout` have none) stops the command with the notebook and cell named, as does a
failing cell; the partly executed copy is kept. Executed notebooks record paths relative to the
project only. A whole run (no `only`) also removes every file of the folder that this execution
did not produce, except the study runner's summary tables.

Each notebook checks its parameters in the cell after its `parameters` cell (`check_parameters`):
a name papermill injected that the parameters cell does not declare (`-p preset …`), a value of
another type than its default, a value outside its choices or a preset that does not load stops
it there, before any work, with one UserError line; this runner checks what it passes before
starting papermill.
"""

from __future__ import annotations

import ast
import difflib
import os
import sys
import tempfile
import time
import typing
from pathlib import Path

import yaml

from ..core.errors import UserError
from ..lab.params import PRESETS_DIR, PROJECT_ROOT, TrainConfig, load_params, preset_path
from .index import write_index
from .store import begin_notebook, prune, report_dir

NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
CELL_TIMEOUT = 900
NO_TIMEOUT_TAG = "no-timeout"
INJECTED_COMMENT = "# Parameters"  # the first line of the cell papermill injects after `parameters`
DEVICES = typing.get_args(typing.get_type_hints(TrainConfig)["device"])  # choices of a `device` parameter
KERNEL_NAME = "rpevit"  # the kernelspec the notebooks declare (make lab / the README install it)
# the notebooks that read a dataset's test images (attention maps): where its files are absent they are not
# re-run, so their committed outputs stay (tests/test_notebooks.py checks the list against the sources)
NEEDS_IMAGES = ("30_attention_maps", "90_explorer")


class NotebookFailed(RuntimeError):
    """A notebook raised an error, or a cell ran past the per-cell limit, while executing."""


def list_notebooks(directory=None) -> list[Path]:
    """The numbered notebooks NN_name.ipynb, in order."""
    return sorted(Path(directory or NOTEBOOKS_DIR).glob("[0-9][0-9]_*.ipynb"))


def declared_parameters(notebook: Path) -> set[str]:
    """The names a notebook's `parameters` cell declares."""
    import papermill

    return set(papermill.inspect_notebook(str(notebook)))


# --------------------------------------------------------------------------- parameters
_NOT_LITERAL = object()


def assignments(source: str) -> dict | None:
    """A parameters cell's names → their values (literals evaluated; others unknown), in order; None
    unless every statement of `source` assigns one name (what papermill's parameters cells hold)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            return None
        try:
            found[name] = ast.literal_eval(value)
        except ValueError:
            found[name] = _NOT_LITERAL
    return found


def parameter_defaults(notebook: Path) -> dict:
    """The names and default values of a notebook's `parameters` cell (as stored)."""
    import nbformat

    cells = nbformat.read(str(notebook), as_version=4).cells
    cell = next((c for c in cells if "parameters" in c.metadata.get("tags", [])), None)
    return (assignments(cell.source) or {}) if cell is not None else {}


def _is_injected(source: str) -> bool:
    return source.split("\n", 1)[0].strip() == INJECTED_COMMENT


def run_parameters(history: list[str]) -> tuple[dict, set[str]]:
    """From IPython's input history `In` (its last entry: the cell running now): the defaults of the
    parameters cell run last, and the names papermill injected in the cell run right after it."""
    for index in range(len(history) - 2, 0, -1):
        defaults = None if _is_injected(history[index]) else assignments(history[index])
        if defaults:
            after = history[index + 1] if index + 1 < len(history) - 1 else ""
            return defaults, set(assignments(after) or {}) if _is_injected(after) else set()
    return {}, set()


def _fits(value, default) -> bool:
    """Whether `value` has the type of `default` (an int is a float; a list holds such items)."""
    if default is None or default is _NOT_LITERAL:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple)) and all(not default or any(_fits(v, d) for d in default) for v in value)
    return isinstance(value, type(default))


def _kind(default) -> str:
    if isinstance(default, (list, tuple)):
        return f"a list like {default!r} (papermill: -y for lists)"
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    return f"{names.get(type(default), type(default).__name__)} like the default {default!r}"


def validate_parameters(defaults: dict, values: dict, given=(), choices: dict | None = None) -> None:
    """One UserError for the first problem with a notebook's parameters: a name in `given` (passed
    from outside) that the parameters cell (`defaults`) does not declare, a value of another type
    than its default, a value outside its `choices`, a preset (`name`) that does not load."""
    if defaults:
        unknown = [name for name in given if name not in defaults]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(defaults), n=1)
            raise UserError(
                f"unknown notebook parameter {', '.join(map(repr, unknown))}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; this notebook's parameters: {', '.join(defaults)} (the preset is `name`)."
            )
    for name, value in values.items():
        if name in defaults and not _fits(value, defaults[name]):
            raise UserError(f"notebook parameter {name} = {value!r} is not valid; expected {_kind(defaults[name])}.")
    for name, allowed in (choices or {}).items():
        if name in values and values[name] not in allowed:
            raise UserError(
                f"notebook parameter {name} = {values[name]!r} is not valid; choose from "
                f"{', '.join(map(repr, allowed))}."
            )
    if isinstance(values.get("name"), str):
        try:
            load_params(values["name"])
        except UserError as exc:
            raise UserError(f"notebook parameter name = {values['name']!r}: {exc}") from None


def check_passed(notebook: Path, parameters: dict) -> None:
    """Validate the parameters passed to a notebook against its parameters cell, before executing it."""
    # the preset itself is loaded already (and `name` may be relative to the project, not to this cwd)
    values = {key: value for key, value in parameters.items() if key != "name"}
    try:
        validate_parameters(parameter_defaults(notebook), values, parameters)
    except UserError as exc:
        raise UserError(f"{notebook.name}: {exc}") from None


def check_parameters(namespace: dict, **choices) -> None:
    """A notebook's first cell after its parameters (`check_parameters(globals(), device=DEVICES)`):
    validate the parameters it runs with (`validate_parameters`), those papermill injected included;
    `choices`: the allowed values of a parameter."""
    defaults, injected = run_parameters(list(namespace.get("In") or []))
    names = [*defaults, *sorted(injected - set(defaults)), *choices, "name"]
    values = {name: namespace[name] for name in dict.fromkeys(names) if name in namespace}
    validate_parameters(defaults, values, sorted(injected), choices)
    if "name" in namespace and namespace["name"] is None:  # opened as it is stored: show a study with numbers
        namespace["name"] = opened_study()


ANSWER_STUDY = "fmnist_converged"  # the study whose kept records hold the project's answer (the README's)
DEMO_STUDY = "smoke"  # what `make study` trains here


def opened_study() -> str:
    """The study a results notebook shows with `name = None` (as stored, opened in JupyterLab): the smoke
    study once its runs are here (`make study` trained them, as notebook 10 does under nbval), else the study
    that holds the project's answer, read from its kept records — numbers on first open, never an empty
    study. Papermill's `name` still chooses."""
    from ..lab.result import results
    from ..lab.schema import finished
    from ..lab.store.catalog import study_records

    return DEMO_STUDY if finished(results(study_records(load_params(DEMO_STUDY)))) else ANSWER_STUDY


def project_relative(path) -> str:
    """`path` relative to the project root when it lies inside it, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(PROJECT_ROOT.resolve()).as_posix()
    except ValueError:
        return str(path)


TRAIN_PARAMETER = "train_missing"  # notebook 10: train the grid's missing runs before plotting


def notebook_parameters(preset: str, notebook: Path | None = None, report_folder=None, train: bool = True) -> dict:
    """The parameters a preset passes to a notebook: its YAML keys, `name` (a preset of params/ by
    its name, any other YAML file by its path, relative to the project when inside it), `report_dir`
    (relative to the project) and, with `train=False`, `train_missing = False` (report what has
    finished, train nothing) — only the names the notebook's parameters cell declares when
    `notebook` is given."""
    load_params(preset)  # fail here, with one clear message, on a bad preset
    path = preset_path(preset)
    raw = yaml.safe_load(path.read_text()) or {}
    shipped = path.resolve() == (PRESETS_DIR / f"{path.stem}.yaml").resolve()
    parameters = {**raw, "name": path.stem if shipped else project_relative(path)}
    if report_folder is not None:
        parameters["report_dir"] = project_relative(report_folder)
    if not train:
        parameters[TRAIN_PARAMETER] = False
    if notebook is None:
        return parameters
    declared = declared_parameters(notebook)
    return {key: value for key, value in parameters.items() if key in declared}


def _relative_strings(node, root: str):
    """Every string in a JSON-like tree with the absolute project root replaced by a relative path."""
    if isinstance(node, str):
        return node.replace(root + os.sep, "").replace(root, ".")
    if isinstance(node, list):
        return [_relative_strings(item, root) for item in node]
    if isinstance(node, dict):
        return {key: _relative_strings(value, root) for key, value in node.items()}
    return node


def finalise_executed(output: Path, source: Path) -> None:
    """Make an executed notebook carry paths relative to the project only and declare the same
    kernel as its source notebook (so it opens with the rpevit kernel in JupyterLab)."""
    import nbformat

    executed = nbformat.read(str(output), as_version=4)
    original = nbformat.read(str(source), as_version=4)
    if "kernelspec" in original.metadata:
        executed.metadata["kernelspec"] = original.metadata["kernelspec"]
    papermill_meta = executed.metadata.get("papermill", {})
    papermill_meta["input_path"] = project_relative(source)
    papermill_meta["output_path"] = project_relative(output)
    cleaned = _relative_strings(executed, str(PROJECT_ROOT.resolve()))
    nbformat.write(nbformat.from_dict(cleaned), str(output))


def _kernel_manager_class(log):
    """A kernel manager whose kernel writes its own log (TCP warning, shutdown interrupts) to `log`."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw.setdefault("stdout", log)
            kw.setdefault("stderr", log)
            return await super().start_kernel(**kw)

    return QuietKernelManager


def cell_timeout_seconds(cell_timeout: float | None = None) -> float:
    """The per-cell limit: the argument, else $RPEVIT_CELL_TIMEOUT, else CELL_TIMEOUT."""
    if cell_timeout is not None:
        return cell_timeout
    value = os.environ.get("RPEVIT_CELL_TIMEOUT", CELL_TIMEOUT)
    try:
        return float(value)
    except ValueError:
        raise UserError(f"RPEVIT_CELL_TIMEOUT must be a number of seconds, got {value!r}.") from None


def execute_notebook(
    notebook: Path, output: Path, parameters: dict, kernel: str = "python3", cell_timeout: float | None = None
) -> float:
    """Execute one notebook with papermill into `output` (cwd: the project root); return seconds."""
    import papermill
    from nbclient.exceptions import CellTimeoutError

    limit = cell_timeout_seconds(cell_timeout)
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:

        def kernel_log() -> str:
            log.seek(0)
            text = log.read().decode(errors="replace").strip()
            return f"\nkernel log:\n{text[-3000:]}" if text else ""

        try:
            papermill.execute_notebook(
                str(notebook),
                str(output),
                parameters=parameters,
                kernel_name=kernel,
                cwd=str(PROJECT_ROOT),
                progress_bar=False,
                log_output=False,
                kernel_manager_class=_kernel_manager_class(log),
                timeout_func=lambda cell: None if NO_TIMEOUT_TAG in cell.metadata.get("tags", []) else limit,
            )
        except papermill.PapermillExecutionError as exc:
            raise NotebookFailed(
                f"notebook {notebook.name} failed in cell {exc.exec_count}: {exc.ename}: "
                f"{exc.evalue} (partly executed copy: {project_relative(output)})"
            ) from None
        except CellTimeoutError:
            raise NotebookFailed(
                f"notebook {notebook.name}: a cell ran longer than the per-cell limit of "
                f"{limit:g} s (RPEVIT_CELL_TIMEOUT; partly executed copy: "
                f"{project_relative(output)}){kernel_log()}"
            ) from None
        except RuntimeError as exc:  # the kernel died or could not start
            raise NotebookFailed(f"notebook {notebook.name}: {exc}{kernel_log()}") from None
    finalise_executed(output, notebook)
    return time.perf_counter() - started


def held_back_without_images(params, chosen: list[Path]) -> list[Path]:
    """`chosen` less the notebooks that need a dataset's images (NEEDS_IMAGES) when a dataset of the preset
    has no files here: their committed outputs are kept, and one `warning:` line says so and how to get it."""
    from ..core.data import files_found, how_to_get

    missing = [name for name in params.datasets if not files_found(name, params.data.root)]
    held = [nb for nb in chosen if nb.stem in NEEDS_IMAGES] if missing else []
    if held:
        print(
            f"warning: {', '.join(missing)} is not on this machine, so {', '.join(nb.stem for nb in held)} "
            f"keep the outputs they have (not re-run); to regenerate them: {how_to_get(missing[0])}",
            file=sys.stderr,
            flush=True,
        )
    return [nb for nb in chosen if nb not in held]


def execute_notebooks(
    preset: str,
    only: list[str] | None = None,
    kernel: str = "python3",
    reports_root=None,
    cell_timeout: float | None = None,
    notebooks_dir=None,
    train: bool = True,
) -> list[Path]:
    """Run the notebooks (all, or those whose names start with an entry of `only`) for a preset
    into reports/<preset>/, then write its README.md (or an installed hook does: rpevit.lab.hooks).
    Returns the executed copies. `train=False` reports what has finished and trains nothing (an interim
    report of a study still training)."""
    params = load_params(preset)
    available = list_notebooks(notebooks_dir)
    chosen = [nb for nb in available if not only or any(nb.stem.startswith(o) for o in only)]
    if only and not chosen:
        raise UserError(f"no notebook matches {only}; notebooks: {', '.join(nb.stem for nb in available)}.")
    for notebook in chosen:  # what each notebook would be passed, checked before anything runs or is written
        check_passed(notebook, notebook_parameters(preset, notebook, train=train))
    chosen = held_back_without_images(params, chosen)
    out_dir = report_dir(params.name, reports_root)
    done = []
    for index, notebook in enumerate(chosen, start=1):
        output = out_dir / notebook.name
        print(f"[{index}/{len(chosen)}] {notebook.stem} → {project_relative(output)} …", end="", flush=True)
        begin_notebook(out_dir, notebook.stem)
        try:
            seconds = execute_notebook(
                notebook, output, notebook_parameters(preset, notebook, out_dir, train), kernel, cell_timeout
            )
        except BaseException:
            print(" failed", flush=True)
            raise
        print(f" {seconds:.0f} s", flush=True)
        done.append(output)
    if not only:
        prune(out_dir, [nb.stem for nb in available])
    from ..lab import hooks
    from ..lab.store.catalog import study_records

    if hooks.report(params, reports_root):  # an installed hook wrote the index (rpevit.lab.hooks)
        return done
    write_index(
        params.name,
        [nb.name for nb in available],
        reports_root,
        found=study_records(params),
        designed_study=params.design.active,
    )
    return done
