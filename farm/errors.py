"""Errors the CLI turns into one clear line on stderr.

BadInput -> exit code 2 (the user named something wrong: a path, a recipe, a prefix).
BuildFailed -> exit code 1 (the input was fine but a stage or a tool failed).
Both carry a message that says what is wrong and what to do about it. BadInput is also the wire's
(farm_common/wire.py): what the toolchain raises for a bad request is the same concept, one class
above both.
"""

from farm_common import wire


class FarmError(Exception):
    exit_code = 1


class BadInput(FarmError, wire.BadInput):
    exit_code = 2


class NotASha(BadInput):
    """Text that is not a sha256 or a 4-64 digit hex prefix of one (HTTP 400)."""


class UnknownArtifact(BadInput):
    """No recorded artifact has this sha256 or prefix (HTTP 404)."""


class AmbiguousPrefix(BadInput):
    """More than one artifact starts with this prefix (HTTP 409, with the candidates)."""

    def __init__(self, message: str, candidates: list[str] | None = None):
        super().__init__(message)
        self.candidates = candidates or []

    def __reduce__(self):
        return (AmbiguousPrefix, (str(self), self.candidates))


class BuildFailed(FarmError):
    exit_code = 1


class StoreError(FarmError):
    """The artifact store cannot be reached or holds bytes that do not match their address."""

    exit_code = 1


class CardRefused(FarmError):
    """A card that does not validate or fails a mechanical check: not published, not written.
    `failures` lists every violation (each names the claim and the measurement it lacks)."""

    exit_code = 1

    def __init__(self, model_id: str, failures: list[str], what: str = "check(s)"):
        self.model_id, self.failures = model_id, failures
        self.what = what
        super().__init__(f"the card of {model_id} fails {len(failures)} {what}, so it is not published: "
                         + "; ".join(failures))

    def __reduce__(self):  # picklable (Prefect may persist a task's exception)
        return (CardRefused, (self.model_id, self.failures, self.what))
