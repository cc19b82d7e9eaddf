"""Imported first by `swarm.p2p.libp2p`: keeps the parts of py-libp2p a node never uses from
being imported (`swarm.core.libp2p_parts`), before any libp2p module loads."""

from swarm.core.libp2p_parts import skip_unused_parts

skip_unused_parts()
