"""What a deployment says, and nothing of the protocol: settings read from the
environment, names, where onceflow keeps its records in a warehouse, the
connections (Kafka cluster and broker profile, S3, Iceberg catalogs) and the
``Deployment`` that carries them into Spark without secrets.

The lowest layer: it imports no other part of onceflow.
"""
