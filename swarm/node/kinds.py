"""The node kind a config asks for: `Node` (trainer, generator) or `Observer`."""

from __future__ import annotations

from swarm.config import Config


def make_node(config: Config, **kwargs):
    """A `Node` (trainer or generator) or an `Observer`, as `config.node.role` says; the
    keyword arguments are theirs (transport, reporter, key_pair, log)."""
    if config.node.role == "observer":
        from swarm.node.observer import Observer

        return Observer(config, **kwargs)
    from swarm.node.lifecycle import Node

    return Node(config, **kwargs)
