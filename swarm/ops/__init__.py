"""Operating a node from the command line: demo, status, views of the ledger, replay, doctor,
private-cluster set-up, and the progress display.

Nothing is imported here: `swarm-node --help` stays instant because each command imports
only the module it needs, when it runs.
"""
