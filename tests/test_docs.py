"""The repository documents itself: no file points to documents outside it, every relative link of
the README and docs/ resolves, every "docs/<page>.md §N" citation names a section that exists,
and every test the docs cite exists."""

from __future__ import annotations

import ast
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

LAYER_ROW = re.compile(r"^\| (\d+) \| [^|]+ \| ([^|]+) \|", re.M)


def layers() -> dict[str, int]:
    """Top-level module or subpackage of rpevit → its layer number, read from the page's table."""
    table = {}
    for number, cell in LAYER_ROW.findall((DOCS / "architecture.md").read_text()):
        for name in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)):
            table["__init__" if name == "rpevit/__init__.py" else name.rstrip("/")] = int(number)
    return table


def package_imports():
    """(importing top-level name, imported top-level name) for every relative import in rpevit/."""
    package = ROOT / "rpevit"
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        here = parts[:-1]  # the package the file belongs to (its own for an __init__.py)
        source = parts[0] if len(parts) > 1 or parts[0] != "__init__" else "__init__"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here[: len(here) - (node.level - 1)]
                names = [node.module.split(".")] if node.module else [[alias.name] for alias in node.names]
                for name in names:
                    target = [*base, *name]
                    yield source, target[0] if target else "__init__"


def test_every_module_is_in_the_layer_table():
    table = layers()
    package = ROOT / "rpevit"
    tops = {p.relative_to(package).parts[0].removesuffix(".py") for p in package.rglob("*.py")}
    assert tops - set(table) == set(), "modules missing from docs/architecture.md §1's table"
    assert set(table) - tops == set(), "the table names modules that do not exist"


def test_imports_flow_down_the_layer_table():
    table = layers()
    upward = {(a, b) for a, b in package_imports() if a != b and table[b] > table[a]}
    assert upward == set(), "imports up the layers of docs/architecture.md §1"


def test_import_rpevit_loads_the_science_core_only():
    """`import rpevit` gives models, positions, attention, data and parameters; the training loop, the
    study runner and everything around them (claims, reports, plots, notebooks, benchmarks, Ray) load
    only when used (rpevit.run_study / rpevit.train_run resolve on first access)."""
    import subprocess
    import sys

    code = "import sys, rpevit; print(' '.join(sorted(m for m in sys.modules if m.startswith('rpevit'))))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert {"rpevit.model", "rpevit.attention", "rpevit.position", "rpevit.params"} <= loaded
    around = {
        "study",
        "train",
        "cell",
        "pack",
        "cluster",
        "claims",
        "report",
        "plots",
        "notebooks",
        "bench",
        "analysis",
    }
    assert not {m.split(".")[1] for m in loaded if "." in m} & around, sorted(loaded)
    code = "import rpevit; print(rpevit.run_study.__module__, rpevit.train_run.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["rpevit.study", "rpevit.train"]


def test_the_finished_filter_is_written_once():
    """Whether a record counts as finished is decided in rpevit/schema.py only (`finished`, `is_finished`,
    `FINISHED`): no other module of the package compares a status with the literal "finished"."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "rpevit"
    inline = re.compile(r"""[!=]=\s*["']finished["']|["']finished["']\s*[!=]=""")
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "schema.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if inline.search(line)
    ]
    assert found == []
