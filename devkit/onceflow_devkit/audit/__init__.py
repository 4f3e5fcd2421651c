"""Independent audits of a pipeline's real outputs (``onceflow audit``)."""
