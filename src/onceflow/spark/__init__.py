"""Spark Python data sources of onceflow (Spark 4.3 ``pyspark.sql.datasource``)."""
