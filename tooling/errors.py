"""The one exception type for a user's mistake in the tooling (shown without a traceback)."""


class ToolingError(Exception):
    """A problem the user can fix; the message is one paragraph: what, what is allowed, the fix."""
