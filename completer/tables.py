"""Tables on stdout: rich's boxes for a person at a terminal, whole values for a pipe or a script.

rich fits a table to the terminal's width, and to 80 columns when stdout is a pipe, folding
and cutting cells: `completer models list | grep qwen2.5-coder-1.5b` then finds nothing.
So a table drawn for a pipe is plain rows instead, and `--json` gives scripts the same data."""

import json
from collections.abc import Sequence

import click
from rich.console import Console
from rich.table import Table

Rows = Sequence[Sequence[str]]


def plain_rows(columns: Sequence[str] | None, rows: Rows) -> str:
    """One tab-separated line per row, the header first when there is one; no value is cut or folded."""
    lines = ([columns] if columns else []) + list(rows)
    # A newline or a tab inside a value would split its row for grep, cut and awk.
    return "\n".join("\t".join(" ".join(value.split()) for value in line) for line in lines)


def terminal_table(columns: Sequence[str] | None, rows: Rows, title: str | None = None) -> Table:
    """rich's table, which on a narrow terminal folds long values rather than cutting them; the first column,
    what a row is (a preset's name to type, a field), is never broken."""
    table = Table(show_header=columns is not None, title=title, title_justify="left")
    for index, header in enumerate(columns or ("key", "value")):
        table.add_column(header, no_wrap=index == 0, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def json_data(columns: Sequence[str] | None, rows: Rows) -> list[dict[str, str]] | dict[str, str]:
    """A JSON object per row keyed by the columns; a key-value table (no columns) is one object."""
    return [dict(zip(columns, row)) for row in rows] if columns else dict(rows)


def show(console: Console, columns: Sequence[str] | None, rows: Rows, title: str | None = None,
         as_json: bool = False) -> None:
    """The rows as JSON, as the table rich draws on a terminal, or else as plain rows under their title.

    `columns` None: a key-value table, drawn without a header."""
    if as_json:
        click.echo(json.dumps(json_data(columns, rows), indent=1))
    elif console.is_terminal:
        console.print(terminal_table(columns, rows, title))
    else:
        click.echo("\n".join(([title] if title else []) + [plain_rows(columns, rows)]))
