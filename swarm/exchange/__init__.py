"""How signed groups move between nodes: the gossip and the pull exchange.

- `base`: the `Exchange` interface and the gossip exchange;
- `pull`: the pull exchange (announce, sample peers, pull only the groups chosen), built from
  `peer_view` (whom to ask), `history_sample` (a sample of every peer ID heard of that
  repetition cannot bias), `pull_choice` (which announced groups to pull; pure) and
  `pull_fetch` (many capped fetches within one deadline).

An exchange moves signed groups; verification is `swarm.verify`, records are `swarm.node`.
"""
