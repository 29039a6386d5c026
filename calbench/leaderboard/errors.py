"""The leaderboard's refusals: the error classes every room raises and the CLI reports in one line."""


class RefusedRunError(ValueError):
    """A run the leaderboard does not accept (not pure T=1 sampling, ``--limit``, bad input)."""


class RecipeError(RefusedRunError):
    """A recipe that cannot be read or run as written (the message names the file and the field)."""
