"""Storage shared by every algorithm: it stores and batches, and does no RL maths."""
from buffers.rollout import CORE_KEYS, MultiAgentRolloutBuffer

__all__ = ["MultiAgentRolloutBuffer", "CORE_KEYS"]
