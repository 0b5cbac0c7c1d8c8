"""Load testing of the model server: Locust users, the local mode, the autoscaling observer and
the ``hey`` wrapper. An installed package (``python -m loadtest.local`` from any directory)."""
