"""The node daemon: wires the round loop to the policy, tasks, transport and ledger.

One round (no global barrier; peers never wait for each other):

1. draw Q task specs from this node's task stream and rebuild the tasks;
2. generate G completions per question and score them with the local verifier;
3. (with peers) publish the groups and drain the inbox into the experience pool;
4. choose the batch (I own + J shared groups with learning signal) and apply one GRPO
   update, which bumps the policy version unless it was skipped;
5. record the round and the update in the ledger in one transaction; evaluate and
   checkpoint when due.

With `sync.publish_deltas` a trainer also publishes a sparse bf16 delta after each update
(`swarm.sync.rules`). A generator-role node (`node.role = "generator"`) has no optimizer:
each round it first applies what the trainer named in `sync.follow` published, then
generates and shares at that policy version, and skips step 4.

A solo node is this same loop with a transport that has no peers. Stopping (Ctrl-C or
`request_stop`) takes effect at the next round boundary and always leaves a checkpoint.

An observer (`node.role = "observer"`) has no model and no rounds: `Observer` joins,
verifies and records every group and delta manifest it hears, pass after pass.
`make_node` builds whichever the config's role asks for.

One module per concern; `Node` is their composition:

- `lifecycle`: `Node`: start, run, stop, close; resuming from a checkpoint; node.json;
- `assembler`: `assemble`, one `Parts` for every node kind, built by the makers;
- `makers`: one plain function per part, from the config (transport, generator, trainer,
  verifier, spot checker, the sync parts);
- `rounds`: one round: generate and score, choose the batch, train, report;
- `sharing`: publishing this node's groups; receiving peers' (validator, inbox, storing,
  spot check);
- `delta_sync`: `DeltaSync`, a generator following its trainer, a trainer publishing its deltas;
- `records`: the ledger rows of rounds, updates, groups, deltas and evaluations;
- `sync`: the rules of following (manifest checks, catch-up plans, payload checks,
  back-off); `delta_publisher` and `delta_follower` over a transport (no ledger, no
  model); `topic_tap`: the delta topic taken off the shared inbox;
- `runlock`: one node per run folder (an exclusive lock file, held until `close()`);
- `monitoring`: the reporters besides the terminal's (node.log, metrics.jsonl,
  TensorBoard, Prometheus metrics) and the swarm sample they get after each round;
- `observer`, `manifests`: the observer role, and its record of peers' delta manifests.

The checks of a whole config before a node loads anything are `swarm.config.preflight`.
"""

from __future__ import annotations

import importlib

# Imported on first use (PEP 562), so that `swarm.node.runlock` (which `swarm-node join`
# needs before it loads anything) does not pull in torch and libp2p with the package.
_EXPORTS = {
    "OwnGroup": "swarm.node.state",
    "Node": "swarm.node.lifecycle",
    "Observer": "swarm.node.observer",
    "NodeState": "swarm.node.state",
    "RoundTimes": "swarm.node.state",
    "SharingStats": "swarm.node.state",
    "evaluate_policy": "swarm.node.rounds",
    "make_generator": "swarm.node.makers",
    "make_node": "swarm.node.kinds",
    "make_transport": "swarm.node.makers",
    "read_psk": "swarm.node.makers",
    "trainer_settings": "swarm.node.makers",
    "transport_settings": "swarm.node.makers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
