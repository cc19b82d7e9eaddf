"""What a running node reports, and to whom: the monitoring interface and its monitors.

- `display`: the `Reporter` interface the node reports to (`RoundReport`, `EvalReport`,
  `RunInfo`, `SwarmSample`), and the terminal monitors (a live view, plain lines, nothing);
- `logs`: node.log and the plain-line reporter that writes it;
- `explog`: metrics.jsonl and TensorBoard;
- `metrics`: the Prometheus endpoint.

Below `swarm.node` and `swarm.ops`: the node reports through it, the operator's commands read it.
"""
