"""The words of the protocol and its pure decisions: reasons and the one table of what each
does (`trace`), errors, outcomes, whose fault, circuits, budgets, the walk and one provider's
turn, identities, events, proxies. No clock, no I/O: `now` and time left come in as arguments."""
