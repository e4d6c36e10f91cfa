"""PySpark's own streaming tests, adapted to run on both engines (issue 47)."""
