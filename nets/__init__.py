"""Generic network modules. Constructors take plain ints; inputs put the agent axis just
before the features: (..., N, in_dim)."""
from nets.encoders import CNNEncoder, FlatEncoder, MultiEncoder, encoder_for
from nets.layers import MLP, AgentLinear, make_linear
from nets.policy import (Actor, AgentNet, Critic, GreedyQ, MaskedCategorical, MaskedGaussian, QPolicy, RunningNorm,
                         ValueNorm, explained_variance, forward_agent)
from nets.policy import DeterministicActor, SquashedGaussianActor
from nets.mixers import NonMonotonicMixer, PerGroup, QMixer, QPLEXMixer, VDNMixer
from nets.recurrent import RecurrentCore
from nets.gnn import GraphNet, MessagePassing, adjacency, edge_features
from nets.transformer import MultiAgentTransformer, SequentialDecoding

__all__ = ["MLP", "AgentLinear", "make_linear", "RecurrentCore", "AgentNet", "Actor", "Critic", "ValueNorm",
           "RunningNorm", "MaskedCategorical", "MaskedGaussian", "explained_variance", "VDNMixer", "QMixer",
           "QPLEXMixer", "QPolicy", "GreedyQ", "DeterministicActor", "SquashedGaussianActor", "NonMonotonicMixer", "PerGroup",
           "GraphNet", "MessagePassing", "adjacency", "edge_features",
           "encoder_for", "CNNEncoder", "FlatEncoder", "MultiEncoder", "forward_agent"]
from nets.shared import (EncodedPolicy, check_policy_output, gradients_reach, same_parameters, shared_between,
                         trainable_parameters)

__all__ += ["EncodedPolicy", "check_policy_output", "gradients_reach", "same_parameters", "shared_between",
            "trainable_parameters"]
__all__ += ["MultiAgentTransformer", "SequentialDecoding"]
