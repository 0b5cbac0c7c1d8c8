"""Load testing of the model server: Locust users, the local mode, the autoscaling observer and
the ``hey`` wrapper. Importable from any directory through ``src/loadtest`` (see there):
``python -m loadtest.local``."""
