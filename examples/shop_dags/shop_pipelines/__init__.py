"""A second example pipeline, ``shop_orders``, written only against onceflow's
public API (``onceflow.pipeline.spec``) the way a user's own package would be: it is not
installed anywhere; it lives beside its DAG file in the DAGs folder, and the
DAG factory ships it to Spark (``--py-files`` under spark-submit, session
artifacts under Spark Connect), where its Python UDF runs on the executors.
"""
