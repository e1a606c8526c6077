"""The GNN options of the algorithm files whose networks can be graphs over the agents (MAPPO,
IPPO), written once: the `GNNArgs` fields, their checks, and `graph_net`, which builds a
`nets.GraphNet` body from them.

`nets/` takes plain ints, never args; this module is the bridge. Besides the `GNNArgs` fields,
`check_gnn_args` and `graph_net` read only `env`, `share_params`, `hidden_sizes`, `recurrent` and
`activation`, which every such file's `Args` has. The critic's own GNN options (`--critic-model`,
MAPPO's `--gnn-critic-pool`) stay in each file: what a graph critic means differs by method.
"""
from dataclasses import dataclass
from typing import Literal, Optional, Tuple

from common.cli import ConfigError
from envs import agent_feature_slices
from nets import GraphNet


@dataclass
class GNNArgs:
    """GNN bodies (nets/gnn.py): the actor's model and the graph every GNN of the run uses."""

    actor_model: Literal["mlp", "gnn"] = "mlp"
    """actor body: "mlp", each agent on its own observation; "gnn", message passing between agents along
    --gnn-topology (nets/gnn.py), so an agent acts on what its neighbours send too"""
    gnn_topology: Literal["full", "empty", "from_pos"] = "full"
    """GNN edges: every agent hears every other (full), none (empty: per-agent MLPs), or those closer than
    --gnn-edge-radius (from_pos, rebuilt every step from the agents' positions)"""
    gnn_edge_radius: float = 0.5
    """with --gnn-topology from_pos: two agents closer than this (env position units) exchange messages"""
    gnn_self_loops: bool = False
    """every agent also sends a message to itself"""
    gnn_layers: int = 1
    """how many of the --hidden-sizes layers pass messages (the first ones; the rest are per-agent layers)"""
    gnn_pos_slice: Optional[Tuple[int, int]] = None
    """START END: each agent's own position in its observation (default: where the env reports it,
    envs.agent_feature_slices); needed by --gnn-topology from_pos"""
    gnn_vel_slice: Optional[Tuple[int, int]] = None
    """START END: each agent's own velocity in its observation (default: where the env reports it)"""
    gnn_edge_features: bool = True
    """messages carry the sender's position relative to the receiver, their distance and relative velocity,
    where positions / velocities are known"""


def check_gnn_args(args, critic_model: str = "mlp") -> None:
    """Reject GNN options that cannot work, before anything starts; `critic_model` is the file's
    --critic-model ("mlp" where the critic has no GNN option). A GNN critic also rules out MAPPO's
    --critic-input, --share-critic with separate actors, and an edgeless graph without pooling."""
    uses_gnn = "gnn" in (args.actor_model, critic_model)
    if uses_gnn and not 1 <= args.gnn_layers <= len(args.hidden_sizes):
        raise ConfigError(f"--gnn-layers must be between 1 and {len(args.hidden_sizes)} (the number of --hidden-sizes "
                          f"layers; the first --gnn-layers of them pass messages), got {args.gnn_layers}")
    if args.gnn_topology == "from_pos" and args.gnn_edge_radius <= 0:
        raise ConfigError(f"--gnn-edge-radius must be positive, got {args.gnn_edge_radius}")
    if uses_gnn and args.share_params == "group":
        raise ConfigError("--share-params group is not available with GNN models yet; use all (one GNN for every "
                          "agent) or none (one GNN per agent)")
    if critic_model != "gnn":
        return
    if getattr(args, "critic_input", "state") != "state":  # MAPPO's
        raise ConfigError("--critic-input is for the MLP critic; the GNN critic's nodes are the agents' observations "
                          "(drop --critic-input or use --critic-model mlp)")
    if getattr(args, "gnn_critic_pool", "mean") == "none" and args.gnn_topology == "empty":
        raise ConfigError("a GNN critic with --gnn-topology empty and --gnn-critic-pool none sees only each agent's "
                          "own observation (that is IPPO); use --gnn-critic-pool mean or another topology")
    if getattr(args, "share_critic", False) and args.share_params != "all":
        raise ConfigError("--share-critic builds one MLP critic with an agent-id one-hot; with --critic-model gnn use "
                          "--share-params all (one GNN critic for every agent) or drop --share-critic")


def graph_net(args, env, out_dim: int, out_gain: float, pool: str = "none") -> GraphNet:
    """A GNN body on the agents' observations (nets/gnn.py). Each agent's own position and velocity
    (the "from_pos" graph, edge features) come from --gnn-pos-slice / --gnn-vel-slice or, by
    default, from where the env reports them; they must lie inside every agent's observation."""
    known = agent_feature_slices(args.env)
    pos, vel = args.gnn_pos_slice or known.get("pos"), args.gnn_vel_slice or known.get("vel")
    if args.gnn_topology == "from_pos" and pos is None:
        raise ConfigError(f"--gnn-topology from_pos needs each agent's position, and {args.env} does not report where "
                          "it is in the observation: give --gnn-pos-slice START END")
    smallest = min(env.obs_dims)
    for flag, span in (("--gnn-pos-slice", pos), ("--gnn-vel-slice", vel)):
        if span is not None and not (len(span) == 2 and 0 <= span[0] < span[1] <= smallest):
            raise ConfigError(f"{flag} {' '.join(map(str, span))} is not inside the observation: need "
                              f"0 <= START < END <= {smallest} (the smallest agent observation of {args.env})")
    shared = args.share_params == "all"
    return GraphNet(env.obs_dim, out_dim, env.n_agents, shared, args.hidden_sizes, args.gnn_layers,
                    args.gnn_topology, args.gnn_edge_radius, args.gnn_self_loops, pos, vel, args.gnn_edge_features,
                    args.recurrent, out_gain, args.activation, pool)
