"""Markdown tables: the one formatter every report, benchmark and command uses."""

from __future__ import annotations

import math


def format_value(value, digits: int = 2) -> str:
    """A cell: '—' for missing/NaN, integers (also integral floats) as integers, floats rounded."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def signed(value: float, digits: int = 2) -> str:
    """A number with its sign always written, and a true minus sign: +0.43, −0.49."""
    return f"{value:+.{digits}f}".replace("-", "−")


def markdown_table(rows: list[dict], columns: list[str] | None = None, digits: int = 2) -> str:
    """Rows (dicts) as a Markdown table; `columns` defaults to the first row's keys."""
    columns = list(columns or (rows[0] if rows else []))
    if not columns:
        return "(no rows)\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_value(row.get(c), digits) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"
