"""onceflow on Spark: the batch job (``batch_job``), run through Spark Connect
(``connect``) or spark-submit (``submit``), the code it is given (``shipping``),
and a local session for the command line (``local_session``). The data sources
are the sources' and sinks' own (``onceflow.sources.kafka``, ``onceflow.sinks.<kind>``)."""
