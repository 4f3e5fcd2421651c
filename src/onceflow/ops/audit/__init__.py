"""``onceflow audit``: every committed batch computed again from its immutable
plan and compared with what its outputs hold (``replay``); the committed
ranges checked for gaps and overlaps (``ranges``)."""
