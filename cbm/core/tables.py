"""Plain-text tables for reports (markdown)."""

from __future__ import annotations

from typing import Any


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A small markdown table; floats shown as percentages with 2 decimals when in [0, 1]."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{100 * v:.2f}" if 0.0 <= v <= 1.0 else f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
