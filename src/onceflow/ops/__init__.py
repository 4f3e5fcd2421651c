"""What an operator runs: the ``onceflow`` command (``cli``) and the audit of
committed batches against their inputs (``audit``)."""
