"""Load testing of the model server: Locust users, the local mode, the autoscaling observer and
the ``hey`` wrapper. Run as modules from the repository root (``python -m loadtest.local``)."""
