"""User-facing errors: one clear message, no traceback (the CLI prints it and exits 2)."""


class UserError(Exception):
    """A mistake the user can fix: bad params, unknown variant, missing dataset.

    The message says what was wrong, what is allowed and what to do.
    """
