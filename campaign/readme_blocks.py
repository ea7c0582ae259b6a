"""The README's generated blocks, `<!-- TAG: where it is quoted from -->` … `<!-- /TAG -->`: each campaign
command that writes a report the README quotes fills its block from it, and tests/test_readme.py checks each
block against its source."""

from __future__ import annotations

from pathlib import Path

from rpevit.core.errors import UserError
from rpevit.lab.store import records

ONE_LINE = "**In one line**: "  # a report's line that the README quotes


def fill(readme: Path, tag: str, body: str) -> bool:
    """Replace what lies between the block's opening line and `<!-- /tag -->` in `readme` by `body` (whole
    lines, each ending in a newline); True if the file changed. One UserError if the block is missing."""
    text = readme.read_text()
    end_mark = f"<!-- /{tag} -->"
    start, end = text.find(f"<!-- {tag}:"), text.find(end_mark)
    if start < 0 or end < start:
        raise UserError(f"{readme} has no {tag} block (<!-- {tag}: … --> … {end_mark}) to fill.")
    start = text.index("\n", start) + 1
    new = text[:start] + body + text[end:]
    if new != text:
        records.write_text(readme, new)
    return new != text
