"""The one way a part makes its command group, so every ``--help`` reads the same.

Click's own help layout, not Rich's panels: Rich fits options into a table at the terminal's
width and cuts what does not fit (``--micro-batch-si…`` at 80 columns), while Click puts each
option's full names first and wraps only the help text after them.
"""

from __future__ import annotations

from typing import Any

import typer


def command_group(**options: Any) -> typer.Typer:
    """A ``typer.Typer`` with tracerl's settings (plain help, no shell-completion commands); ``options`` go to it."""
    return typer.Typer(rich_markup_mode=None, add_completion=False, **options)
