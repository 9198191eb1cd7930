"""Experiments on a server: `ab` (interleaved A/B rounds) and `sweep` (candidate configurations), on one host
or on the nodes of one server, around the server as found (as_found.py: found state, ledger checks, restore),
the journal that survives the laptop (ab_journal.py) and the signals that must not cut a restore short
(ab_signals.py)."""
