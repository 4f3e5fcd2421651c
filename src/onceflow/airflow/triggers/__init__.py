"""onceflow's Airflow triggers (they run in the triggerer)."""
