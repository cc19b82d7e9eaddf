"""Delta sync: a generator follows one trainer's policy through signed sparse weight deltas.

- `rules`: what a delta, an anchor and a manifest must be (pure checks and the chain rules);
- `publisher`: the trainer's side (encode, serve, announce after each update);
- `follower`: the generator's side (take manifests, fetch, check, apply), made of
  `manifest_inbox` (the manifests it knows, the payloads it refuses) and `payloads`
  (fetching from holders or the trainer, applying);
- `holders`: deltas from any holder, so a trainer's upload stays about constant;
- `manifests`: peers' manifests as an observer records them.

Delta coding itself (top-k, quantisation, the byte format) is `swarm.policy.delta`.
"""
