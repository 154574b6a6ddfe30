"""The one exception type for a user's mistake, and the one way a config value is checked.

The CLI prints a `UserError` as one paragraph without a traceback and exits with
`USER_ERROR_EXIT_CODE`; everything else is our bug and keeps its traceback.
"""

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """Bad input the user can fix. The message says what was wrong, what is allowed, and the fix."""


def require(condition: bool, dotted: str, value: object, allowed: str) -> None:
    """A config value's check: a UserError naming the dotted key, the value given and what is allowed."""
    if not condition:
        raise UserError(f"config key {dotted!r} got {value!r}; allowed: {allowed}. Fix the value and rerun.")
