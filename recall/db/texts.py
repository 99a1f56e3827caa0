"""A chunk's texts kept as one deflated blob (issue 36.4: markdown deflates to about half): its
heading path (n = 0), body (1), file path (2) and identifier tokens (3). The `chunks` view and the
FTS triggers read them back through the SQL function `chunk_text(texts, n)`, registered on every
connection. This is a stored format: a change to it needs a migration."""
from __future__ import annotations

import zlib

# what SQLite says when chunk_text (the DB's only function) cannot unpack a blob: noise in it
UNREADABLE = "user-defined function raised exception"


def pack(*texts: str) -> bytes:
    """The texts as one blob: their lengths on a first line, then the texts, deflated."""
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    head = ",".join(str(len(t)) for t in texts)
    return z.compress(f"{head}\n{''.join(texts)}".encode("utf-8")) + z.flush()


def unpack(blob: bytes) -> list:
    """Every text of a packed blob."""
    head, _, joined = zlib.decompress(blob, -15).decode("utf-8").partition("\n")
    texts, start = [], 0
    for size in map(int, head.split(",")):
        texts.append(joined[start:start + size])
        start += size
    return texts


_last: tuple = (b"", [])        # the blob last unpacked: a row's columns are read one after another


def text(blob: bytes, n: int) -> str:
    """The `n`th text of a packed blob."""
    global _last
    seen, texts = _last
    if seen != blob:
        texts = unpack(blob)
        _last = (blob, texts)
    return texts[n]


UNPACK_FAILED: list = []    # a blob chunk_text could not unpack in this process (noise in the file)


def _checked(blob: bytes, n: int) -> str:
    try:
        return text(blob, n)
    except Exception:
        UNPACK_FAILED.append(True)
        raise


def swallowed_interrupt(message: str) -> bool:
    """Whether SQLite's UNREADABLE was a Ctrl-C (or SIGTERM) raised inside chunk_text, which SQLite
    swallows into that message: no blob failed to unpack, so the file is sound."""
    return UNREADABLE in message and not UNPACK_FAILED


def register(con) -> None:
    con.create_function("chunk_text", 2, _checked, deterministic=True)
