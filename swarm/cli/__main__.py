"""`python -m swarm.cli`: the same as the `swarm-node` command."""

from swarm.cli import main

main()
