"""The lab: experiments, benchmarks and attack harnesses around swarm-node, reached from
`scripts/` and tests. It imports `swarm`; `swarm` never imports it, and the swarm-node wheel
does not contain it (its own distribution is lab/pyproject.toml, which scripts/setup.sh
installs).

- `experiment`: the SAPO studies (arms, protocols, testbeds, the acceptance rule);
- `network_node`, `network_settings`, `paced_rounds`, `synthetic`: a model-less swarm
  member with made-up completions, for measuring the network at scale;
- `scale_sim`, `sim_conditions`, `scale_real`: the exchange at scale, in one process
  (latency, loss, adversaries) or as real processes;
- `delta_sim`: delta sync at scale;
- `footprint`: resident memory and traffic measurements.

Scripts under `scripts/` that are their options and one call into a module here:
- the SAPO studies' checks: `positive_control`, `drift`, `calibrate`, `libp2p_check`,
  `ship_models` (the testbed models shipped under models/);
- a node's costs: `round_time`, `prefix_memory`, `node_footprint`, `verify_cost`,
  `delta_measure` and `delta_bench`, `trl_arms` and `trl_bench` (beside TRL), `gpu_smoke`;
- the swarm's: `scale_runs` and `scale_report`; `gossip_worker`, `gossip_driver`,
  `gossip_bench`;
- attacks and crashes: `flood_attacker`, `flood_victim`, `flood_bench`; `kill_node`,
  `kill_checks`, `kill_loop`.
- the ledger: `ledger_week` (a week of accepted groups, with and without retention).
"""
