"""Views and listeners over the engine: the status view, the report of the attempt log,
alerts and tracing."""
