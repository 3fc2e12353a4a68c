"""Token corpora (Megatron ``PREFIX.bin`` + ``PREFIX.idx``, llm.c shards,
headerless token files): the options of the format, given to
``DataLoader(format_options=gpufeed.TokenOptions(...))`` (docs/tokens.md).
How windows are cut and batched is the transform's:
:class:`gpufeed.TokenWindows`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, Optional, Tuple

__all__ = ["TokenOptions", "TOKEN_DTYPES"]

#: Names accepted by ``token_dtype=``.
TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")


def check_token_dtype(token_dtype: Optional[str]) -> None:
    """ValueError unless ``token_dtype`` is None or one of TOKEN_DTYPES."""
    if token_dtype is not None and token_dtype not in TOKEN_DTYPES:
        raise ValueError(f"token_dtype must be one of {', '.join(TOKEN_DTYPES)}, "
                         f"not {token_dtype!r}")


@dataclasses.dataclass(frozen=True)
class TokenOptions:
    """How a token corpus is opened.

    ``token_dtype``: the element type of a headerless file (``format="tokens"``,
    where it is needed); for Megatron and llm.c files, when given, it must
    match the header's. None: from the header."""

    #: The formats these options are for.
    formats: ClassVar[Tuple[str, ...]] = ("megatron", "llmc", "tokens")

    token_dtype: Optional[str] = None

    def __post_init__(self):
        check_token_dtype(self.token_dtype)

    def _native(self) -> Dict[str, Any]:
        return dict(token_dtype=self.token_dtype or "auto")
