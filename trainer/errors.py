"""The one exception type for a user's mistake.

The CLI prints a `UserError` as one paragraph without a traceback and exits with
`USER_ERROR_EXIT_CODE`; everything else is our bug and keeps its traceback.
"""

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """Bad input the user can fix. The message says what was wrong, what is allowed, and the fix."""
