"""The one I/O loop and its parts: the walk (`loop.Engine`), one provider's turn (`turns`), a
request on its way (`run`), one try (`send`), streams (`stream`), hedging, providers resolved
once (`prepared`), health checks and the ledger of circuits and budgets."""
