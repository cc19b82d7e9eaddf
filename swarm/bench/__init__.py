"""Benchmarks and research harnesses, reached from `scripts/` and tests, never by a node.

- `experiment`: the SAPO studies (arms, protocols, testbeds, the acceptance rule);
- `network_node`, `synthetic`: a model-less swarm member with made-up completions, for
  measuring the network at scale;
- `scale_sim`, `sim_conditions`, `scale_real`: the exchange at scale, in one process
  (latency, loss, adversaries) or as real processes;
- `delta_sim`: delta sync at scale;
- `footprint`: resident memory and traffic measurements.
"""
