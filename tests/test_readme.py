"""The README's first screen: short, the answer first, and every number of the answer quoted from
the report that computed it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LIMIT, ANSWER_WITHIN, FIRST_STUDY_WITHIN = 8000, 2600, 6500
NUMBER = re.compile(r"[−+-]?\d+\.\d+")


def _answer() -> tuple[str, Path]:
    match = re.search(r"<!-- answer: numbers quoted from (\S+) [^>]*-->\n(.*?)<!-- /answer -->", README, re.S)
    assert match, "the README has no answer block"
    return match.group(2), ROOT / match.group(1)


def test_readme_is_short_with_the_answer_on_the_first_screen():
    """The answer leads: where the pilots (tasks where position matters) stand, then the first study's."""
    assert len(README) <= LIMIT, f"README.md has {len(README)} characters; keep it ≤ {LIMIT} (details go to docs/)"
    standing = README.index("\n", README.index("<!-- pilots:")) + 1
    assert README.startswith("**", standing) and README.index("\n", standing) < ANSWER_WITHIN
    assert README.index("<!-- /answer -->") < FIRST_STUDY_WITHIN
    for command in ("make study", "make test", "--no-train"):
        assert command in README


def test_every_number_of_the_answer_is_in_its_report():
    answer, source = _answer()
    report = source.read_text().replace("−", "-")
    numbers = NUMBER.findall(answer)
    assert len(numbers) >= 10, numbers  # the four gaps and two closings with intervals, the costs
    missing = [n for n in numbers if n.replace("−", "-").lstrip("+") not in report]
    assert not missing, f"numbers of the README's answer not in {source.relative_to(ROOT)}: {missing}"


def test_a_changed_number_is_caught():
    answer, source = _answer()
    report = source.read_text().replace("−", "-")
    assert "-0.03" in report and "-0.13" not in report  # the check above would catch −0.13 for −0.03


def test_the_pilots_table_is_the_overview_report_s():
    """The README's table of the gap pilots is reports/gap_pilots.md's, line for line (that file is checked
    against the kept records in tests/test_gap_pilot.py)."""
    match = re.search(r"<!-- pilots: quoted from (\S+) [^>]*-->\n(.*?)<!-- /pilots -->", README, re.S)
    assert match, "the README has no pilots block"
    from campaign.pilot_overview import LONGER, TREND, readme_block

    report = (ROOT / match.group(1)).read_text().splitlines()
    standing = [line for line in report if line.startswith("**") and not line.startswith(LONGER)]
    table = [line for line in report if line.startswith("|")]
    assert len(standing) == 1 and len(table) >= 6
    assert "![" in README[match.end() :].split("\n\n")[1], "the figure follows the pilots block"
    quoted = match.group(2).splitlines()
    assert quoted == readme_block(report), "run `python -m campaign gap-pilot --overview`"
    # the restated answer: where softmax led and how its lead moved, the tasks and equal time; not the counts
    assert quoted[: len(table) + 2] == [*standing, "", *table] and not any(
        q.startswith((TREND, LONGER)) for q in quoted
    )
    assert any(q.startswith("Tasks: ") for q in quoted) and any("softmax led in every seed pair" in q for q in quoted)


def test_the_overview_command_fills_the_pilots_block(tmp_path):
    from campaign.pilot_overview import sync_readme

    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- pilots: quoted from x -->\n| old |\n<!-- /pilots -->\nbottom\n")
    lines = ["# title", "", "a note", "", "**where**", "", "| a |", "|---|", "| 1 |", "", "Across the pilots …"]
    lines += ["", "On `p` softmax led …", "", "![figure](f.png)"]
    assert sync_readme(readme, lines)
    block = "**where**\n\n| a |\n|---|\n| 1 |\n\nOn `p` softmax led …\n"  # the counts stay in the overview
    assert readme.read_text() == f"top\n<!-- pilots: quoted from x -->\n{block}<!-- /pilots -->\nbottom\n"
    assert not sync_readme(readme, ["**where**", "| a |", "|---|", "| 1 |", "", "On `p` softmax led …"])


def test_the_recall_block_is_each_recall_pilot_s_line_from_its_report_then_the_order_s_answer():
    """Each line of the README's recall block is the `**In one line**` of a recall pilot's report, in the
    pre-registered order, for every pilot that has a report; then the order's answer from
    reports/recall_pilots.md once it has one (`python -m campaign recall-pilot PILOT|--overview` fill it)."""
    from campaign.recall_overview import ANSWER, OVERVIEW
    from campaign.recall_pilot import ONE_LINE, ORDER

    match = re.search(r"<!-- recall: [^>]*-->\n(.*?)<!-- /recall -->", README, re.S)
    assert match, "the README has no recall block"
    wanted = [
        f"- {line.removeprefix(ONE_LINE)}"
        for name in ORDER
        if (report := ROOT / "reports" / name / "README.md").is_file()
        for line in report.read_text().splitlines()
        if line.startswith(ONE_LINE)
    ]
    said = [line for line in (ROOT / "reports" / OVERVIEW).read_text().splitlines() if line.startswith(ANSWER)]
    assert wanted and match.group(1).splitlines() == wanted + [x for line in said for x in ("", line)]


@pytest.mark.parametrize("quoting", ["README.md", "docs/results.md"])
def test_the_longer_study_s_line_is_its_report_s(quoting):
    """The long block of the README and of docs/results.md is the `**In one line**` of each quoted study's report
    (its go/no-go and each Performer's gap at 64 epochs); `python -m campaign gap-pilot canvas40_long` fills both."""
    from campaign.long_study import QUOTED
    from campaign.readme_blocks import ONE_LINE

    match = re.search(r"<!-- long: [^>]*-->\n(.*?)<!-- /long -->", (ROOT / quoting).read_text(), re.S)
    assert match, f"{quoting} has no long block"
    wanted = [
        f"- {line.removeprefix(ONE_LINE)}"
        for name in QUOTED
        for line in (ROOT / "reports" / name / "README.md").read_text().splitlines()
        if line.startswith(ONE_LINE)
    ]
    assert wanted and match.group(1).splitlines() == wanted, "run `python -m campaign gap-pilot canvas40_long`"


def test_the_recall_command_fills_the_recall_block(tmp_path):
    from campaign.recall_pilot import sync_readme

    readme, reports = tmp_path / "README.md", tmp_path / "reports"
    readme.write_text("top\n<!-- recall: x -->\n- old\n<!-- /recall -->\nbottom\n")
    (reports / "recall_pilot_samecell").mkdir(parents=True)
    (reports / "recall_pilot_samecell" / "README.md").write_text("# t\n\n**In one line**: `b` is open.\n")
    (reports / "recall_pilot").mkdir()
    (reports / "recall_pilot" / "README.md").write_text("**In one line**: `a` **NO-GO**.\n")
    assert sync_readme(readme, reports)
    assert readme.read_text() == "top\n<!-- recall: x -->\n- `a` **NO-GO**.\n- `b` is open.\n<!-- /recall -->\nbottom\n"
    assert not sync_readme(readme, reports)
