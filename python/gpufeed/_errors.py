"""Exceptions raised by gpufeed.

Every error from the native core is a :class:`gpufeed.Error`; each also
derives from the built-in exception a Python user would expect, so existing
``except FileNotFoundError`` / ``except IndexError`` code keeps working.
"""

__all__ = [
    "Error",
    "CorruptRecordError",
    "NotFoundError",
    "PermissionDeniedError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "NotSupportedError",
    "AlreadyExistsError",
    "StorageIOError",
    "CancelledError",
]


class Error(Exception):
    """Base class of every gpufeed error."""


class CorruptRecordError(Error, ValueError):
    """Bytes on disk do not follow the format; the message names the file,
    the byte offset and the sample."""


class NotFoundError(Error, FileNotFoundError):
    """A dataset, shard, index or class folder does not exist."""


class PermissionDeniedError(Error, PermissionError):
    """The operating system refused access (EACCES/EPERM)."""


class InvalidArgumentError(Error, ValueError):
    """An argument or an input is malformed (including an empty dataset)."""


class OutOfRangeError(Error, IndexError):
    """An index past the end."""


class NotSupportedError(Error, NotImplementedError):
    """A feature that this build or this machine does not have."""


class AlreadyExistsError(Error, FileExistsError):
    """Refusing to overwrite existing output."""


class StorageIOError(Error, OSError):
    """Any other failure of the operating system while reading or writing."""


class CancelledError(Error):
    """The operation was stopped on request."""
