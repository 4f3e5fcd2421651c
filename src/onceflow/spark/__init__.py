"""Spark Python data sources of onceflow (Spark 4 ``pyspark.sql.datasource``)."""
