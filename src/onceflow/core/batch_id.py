"""A batch's id: its sequence number in the pipeline (1, 2, ...).

``str()`` spells it as paths, the ledger and logs do: ten digits,
zero-padded, so that ids sort as numbers do. Use ``BatchId(seq)`` wherever
a batch is named; nothing else formats a sequence number.
"""

from __future__ import annotations

WIDTH = 10


class BatchId(int):
    def __new__(cls, seq: int) -> "BatchId":
        if int(seq) < 0:
            raise ValueError(f"a batch sequence number is >= 0, got {seq}")
        return super().__new__(cls, seq)

    def __str__(self) -> str:
        return f"{int(self):0{WIDTH}d}"

    def __repr__(self) -> str:
        return f"BatchId({int(self)})"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int.__format__(int(self), spec)

    @classmethod
    def parse(cls, text: str) -> "BatchId":
        """The id from its spelling (``0000000007``), e.g. a ledger or staging path part."""
        if len(text) != WIDTH or not text.isdigit():
            raise ValueError(f"{text!r} is not a batch id: {WIDTH} digits expected")
        return cls(int(text))
