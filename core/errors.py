"""Errors that reach the user as one clear line.

Everything the user can get wrong (a model, a file, an input array, a
configuration, a layer that does not fit the engine) raises a subclass of
:class:`FpgacnnError` whose message names the culprit and the reason. The CLI
prints ``fpgacnn: error: <message>`` and exits non-zero, with no traceback.
"""

__all__ = ["FpgacnnError", "ModelError", "InputError", "MappingError", "BackendError"]


class FpgacnnError(Exception):
    """Base class of all user-facing errors."""


class ModelError(FpgacnnError):
    """The model file cannot be imported: unreadable, corrupt, or using an
    operator or attribute fpgacnn does not support (the message names the node)."""


class InputError(FpgacnnError):
    """An input array or argument has the wrong file type, shape or dtype."""


class MappingError(FpgacnnError):
    """A layer does not fit the engine's limits (the message names layer and limit)."""


class BackendError(FpgacnnError):
    """A backend failed: simulator build, board, DMA timeout, ID ROM mismatch."""
