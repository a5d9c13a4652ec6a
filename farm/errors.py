"""Errors the CLI turns into one clear line on stderr.

BadInput -> exit code 2 (the user named something wrong: a path, a recipe, a prefix).
BuildFailed -> exit code 1 (the input was fine but a stage or a tool failed).
Both carry a message that says what is wrong and what to do about it.
"""


class FarmError(Exception):
    exit_code = 1


class BadInput(FarmError):
    exit_code = 2


class BuildFailed(FarmError):
    exit_code = 1


class StoreError(FarmError):
    """The artifact store cannot be reached or holds bytes that do not match their address."""

    exit_code = 1
