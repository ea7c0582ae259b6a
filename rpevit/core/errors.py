"""User-facing errors: one clear message, no traceback (the CLI prints it and exits 2)."""


class UserError(Exception):
    """A mistake the user can fix: bad params, unknown variant, missing dataset.

    The message says what was wrong, what is allowed and what to do.
    """

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: a notebook (and papermill's error report) shows the one line, no traceback."""
        return [f"{type(self).__name__}: {self}"]
