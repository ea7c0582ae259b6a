"""The repository documents itself: no file points to documents outside it, every relative link of
the README and docs/ resolves, every "docs/<page>.md §N" citation names a section that exists,
and every test the docs cite exists."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [
    "methods.md",
    "architecture.md",
    "statistics.md",
    "results.md",
    "running.md",
    "records.md",
    "scaling.md",
    "variants.md",
    "extending.md",
    "testing.md",
]
# Built from parts so that this file does not contain what it looks for.
OUTSIDE = [name.encode() for name in ("REFERENCE" + ".md", "DESIGN" + ".md", ".." + "/shared")]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
CITATION = re.compile(r"docs/(\w+)\.md §(\d+)")


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *(DOCS / page for page in PAGES)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def sections(page: Path) -> set[str]:
    """The numbers N of the headings '## N. …' of a page."""
    return set(re.findall(r"^## (\d+)\. ", page.read_text(), flags=re.M))


def test_the_documentation_pages_exist():
    for page in PAGES:
        assert (DOCS / page).is_file(), f"docs/{page} is missing"


def test_no_tracked_file_points_outside_the_repository():
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        offenders += [f"{path.relative_to(ROOT)}: {name.decode()}" for name in OUTSIDE if name in data]
    assert not offenders, "files citing documents outside the repository:\n" + "\n".join(offenders)


def test_relative_links_of_readme_and_docs_resolve():
    broken = []
    for page in markdown_files():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for match in LINK.finditer(text):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: …
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_section_citations_name_existing_sections():
    known = {page[:-3]: sections(DOCS / page) for page in PAGES}
    wrong = []
    for path in tracked_files():
        if path.suffix not in (".py", ".md", ".ipynb", ".csv", ".json", ".yaml") or not path.is_file():
            continue
        for page, number in CITATION.findall(path.read_text(errors="replace")):
            if number not in known.get(page, set()):
                wrong.append(f"{path.relative_to(ROOT)}: docs/{page}.md §{number}")
    assert not wrong, "citations of sections that do not exist:\n" + "\n".join(sorted(set(wrong)))


TEST_NAME = re.compile(r"`(?:tests/\w+\.py)?::(test_\w+)`")


def test_tests_named_in_the_docs_exist():
    """A test the documentation cites as evidence (`::test_name`) is a test function of tests/."""
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
    cited = {(page.name, name) for page in markdown_files() for name in TEST_NAME.findall(page.read_text())}
    assert len(cited) > 20  # the pattern still finds the citations
    missing = sorted(f"{page}: {name}" for page, name in cited if name not in defined)
    assert not missing, "tests cited in the docs that do not exist:\n" + "\n".join(missing)


# --- docs/architecture.md §1: the layer table is the import rule -------------------------------------

LAYER_ROW = re.compile(r"^\| (\d+) \| [^|]+ \| `([^`]+)` \| ([^|]+) \|", re.M)
SUBPACKAGES = ("core", "lab", "report")


def layers() -> dict[str, int]:
    """Member of rpevit ("core/grid", "lab/study", "cli") → its row number, read from the page's table."""
    table = {}
    for number, subpackage, cell in LAYER_ROW.findall((DOCS / "architecture.md").read_text()):
        prefix = "" if subpackage == "rpevit/" else subpackage
        for name in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)):
            table[prefix + name.rstrip("/")] = int(number)
    return table


def member(parts: list[str]) -> str:
    """The member a module path (inside rpevit/, without .py) belongs to: subpackage/name, or name."""
    if parts and parts[0] in SUBPACKAGES:
        return "/".join(parts[:2]) if len(parts) > 1 else parts[0] + "/__init__"
    return parts[0] if parts else "__init__"


def package_imports():
    """(importing member, imported member) for every import of the package inside rpevit/."""
    package = ROOT / "rpevit"
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        here = parts[:-1]  # the package the file belongs to (its own for an __init__.py)
        source = member(parts if parts[-1] != "__init__" or len(parts) == 1 else parts[:-1] + ["__init__"])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here[: len(here) - (node.level - 1)]
                names = [node.module.split(".")] if node.module else [[alias.name] for alias in node.names]
                for name in names:
                    yield source, member([*base, *name])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rpevit":
                yield source, member(node.module.split(".")[1:] or [alias.name for alias in node.names][:1])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "rpevit":
                        yield source, member(alias.name.split(".")[1:])


def test_every_module_is_in_the_layer_table():
    table = layers()
    package = ROOT / "rpevit"
    members = {member(list(p.relative_to(package).with_suffix("").parts)) for p in package.rglob("*.py")}
    members = {m for m in members if not m.endswith("/__init__")}
    assert members - set(table) == set(), "modules missing from docs/architecture.md §1's table"
    assert set(table) - members == set(), "the table names modules that do not exist"


def test_imports_flow_down_the_layer_table():
    table = {**layers(), **{f"{sub}/__init__": -1 for sub in SUBPACKAGES}}
    for sub in SUBPACKAGES:  # a subpackage's __init__ sits with its lowest member
        table[f"{sub}/__init__"] = min(n for m, n in table.items() if m.startswith(sub + "/") and n >= 0)
    upward = {(a, b) for a, b in package_imports() if a != b and table[b] > table[a]}
    assert upward == set(), "imports up the layers of docs/architecture.md §1"


WINGS = ("lab/store", "lab/training", "lab/bench", "lab/schedule")  # the lab's wings, lowest first


def test_the_lab_wings_import_downwards_only():
    """store ← training ← bench ← schedule: a wing imports only the wings below it (and the lab's base and
    configuration); the store knows nothing of training, benchmarks or scheduling."""
    up = {(a, b) for a, b in package_imports() if a in WINGS and b in WINGS and WINGS.index(b) > WINGS.index(a)}
    assert up == set()
    wings_of_table = [m for m in layers() if m in WINGS]
    assert sorted(wings_of_table, key=layers().get) == list(WINGS), "docs/architecture.md lists the wings in order"


def test_the_core_imports_nothing_outside_itself_and_the_lab_nothing_above_it():
    below = {"core": {"core"}, "lab": {"core", "lab"}, "report": {"core", "lab", "report"}}
    wrong = {
        (a, b)
        for a, b in package_imports()
        if a.split("/")[0] in below and b.split("/")[0] not in below[a.split("/")[0]]
    }
    assert wrong == set()


def test_no_import_cycle_between_members():
    """No package-level loop: the graph of imports between members (module-level and inside functions)
    has no cycle."""
    graph: dict[str, set[str]] = {}
    for a, b in package_imports():
        if a != b:
            graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in graph.get(node, ()):
            assert state.get(nxt) != 1, "import cycle: " + " → ".join([*path, node, nxt])
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def imported_packages(folder: str):
    """(file, top-level package) for every absolute import in the files under folder/ (module level or
    inside a function)."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            yield from ((str(path.relative_to(ROOT)), n.split(".")[0]) for n in names)


def test_no_rpevit_module_imports_the_notebooks_analysis_and_the_analysis_not_the_campaign():
    """rpevit holds the models, the training loop and the study runner; the notebooks' analysis sits above
    it (it imports rpevit) and below the campaign (it never imports campaign)."""
    assert [f for f, package in imported_packages("rpevit") if package == "analysis"] == []
    assert [f for f, package in imported_packages("analysis") if package == "campaign"] == []
    assert any(package == "rpevit" for _, package in imported_packages("analysis"))


def test_no_rpevit_module_imports_the_campaign():
    """The library does not know the project's campaign exists: no import of `campaign` anywhere under rpevit/
    (module level or inside a function); the campaign reaches a study through rpevit.lab.hooks only."""
    found = []
    for path in sorted((ROOT / "rpevit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "campaign"]
    assert found == []
    named = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "rpevit").rglob("*.py")) if "campaign" in p.read_text()]
    assert named == [], "rpevit names the campaign (an import by string, a docstring's pointer)"


def library_files() -> list[Path]:
    """The package's files and the notebooks' analysis beside it: one set of rules for both."""
    return sorted((ROOT / "rpevit").rglob("*.py")) + sorted((ROOT / "analysis").rglob("*.py"))


# the entry points that take a preset's name (a command's argument, a notebook's parameter) and load it; every
# other function takes `Params` (loading only the presets a Params names: its reference, donor or check)
NAME_ENTRY_POINTS = {
    "cli.py:_params",
    "report/notebooks.py:validate_parameters",
    "report/notebooks.py:notebook_parameters",
    "report/notebooks.py:execute_notebooks",
    "lab/bench/pack.py:run_pack_bench",
    "lab/bench/throughput.py:_levers_bench",
    "lab/bench/throughput.py:_speed_bench",
}


def test_only_the_entry_points_take_a_preset_name_where_params_would_do():
    """Values instead of names: a function that passes one of its own arguments to load_params takes a name;
    only the listed entry points may (loading `params.reference` etc. from a Params is fine)."""
    found = set()
    for path in library_files():
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            own = {a.arg for a in fn.args.args + fn.args.kwonlyargs} - {"params"}
            for call in ast.walk(fn):
                called = getattr(call, "func", None)
                if isinstance(call, ast.Call) and getattr(called, "id", getattr(called, "attr", "")) == "load_params":
                    used = {n.id for arg in call.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
                    if used & own:
                        found.add(f"{path.relative_to(ROOT).as_posix().removeprefix('rpevit/')}:{fn.name}")
    assert found == NAME_ENTRY_POINTS


def test_the_campaign_modules_stay_within_500_lines_too():
    too_long = [p.name for p in sorted((ROOT / "campaign").rglob("*.py")) if len(p.read_text().splitlines()) > 500]
    assert too_long == []


def test_the_core_trains_alone(tmp_path):
    """docs/architecture.md §1's snippet runs as written (on 5,000 MNIST images, four epochs of a
    small model) and beats chance, loading no module of rpevit outside rpevit.core."""
    import subprocess
    import sys

    page = (DOCS / "architecture.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page[page.index("## 1.") :], re.S).group(1)
    check = "\nimport sys\nloaded = [m for m in sys.modules if m.startswith('rpevit.')]\n"
    check += "print(sorted(m for m in loaded if not m.startswith('rpevit.core')))"
    done = subprocess.run(
        [sys.executable, "-c", snippet + check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy_line, modules_line = done.stdout.strip().splitlines()[-2:]
    assert float(accuracy_line.split()[-1]) > 0.3  # ten classes: chance is 0.1
    assert modules_line == "[]"


def test_import_rpevit_loads_the_science_core_only():
    """`import rpevit` loads rpevit.core and nothing of the lab, analysis or tools; the lab's public names
    (Run, load_params, run_study, train_run) resolve on first access."""
    import subprocess
    import sys

    code = "import sys, rpevit; print(' '.join(sorted(m for m in sys.modules if m.startswith('rpevit'))))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert {"rpevit.core.model", "rpevit.core.attention", "rpevit.core.position", "rpevit.core.config"} <= loaded
    assert {m for m in loaded if m != "rpevit" and not m.startswith("rpevit.core.")} == {"rpevit.core"}
    names = ("Run", "load_params", "run_study", "train_run")
    code = f"import rpevit; print(*(getattr(rpevit, n).__module__ for n in {names}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [
        "rpevit.lab.store.run",
        "rpevit.lab.params",
        "rpevit.lab.schedule.study",
        "rpevit.lab.training.train",
    ]


def test_the_finished_filter_is_written_once():
    """Whether a record counts as finished is decided in rpevit/lab/schema.py only (`finished`, `is_finished`,
    `FINISHED`): no other module of the package compares a status with the literal "finished"."""
    import re

    inline = re.compile(r"""[!=]=\s*["']finished["']|["']finished["']\s*[!=]=""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in library_files()
        if path.name != "schema.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if inline.search(line)
    ]
    assert found == []


def test_long_functions_say_why():
    """A function of the package over 80 lines has a `# long: <reason>` comment on the line above it."""
    silent = []
    for path in library_files():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if not lines[first - 2].strip().startswith("# long: "):
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert silent == [], "functions over 80 lines without a reason beside them"


def test_modules_stay_within_500_lines():
    too_long = [f"{p.relative_to(ROOT)}: {n}" for p in library_files() if (n := len(p.read_text().splitlines())) > 500]
    assert too_long == []
