"""The lowest layer: what every other package may use and that uses nothing of theirs.

- `errors`: the `SwarmError` tree every part raises and the CLI turns into one-line messages;
- `reasons`: why a peer's message was refused (`Reason`), shared by verification, the
  transport, the ledger and the metrics;
- `identity`: a node's Ed25519 key, its peer ID, and plain sign / verify over bytes;
- `libp2p_parts`: keeps the parts of py-libp2p a node never uses from being imported.
"""
