"""``HAQSearcher``: reinforcement learning over the layers, with HAQ's budget enforcement.

HAQ (Wang et al., CVPR 2019) trains a DDPG agent that walks the layers and picks each one's
width; when the finished episode is over the budget it lowers widths layer by layer until the
scheme fits, and the accuracy of that scheme is the reward. This searcher keeps the episode
structure, the enforcement and the reward, and swaps DDPG for a simpler agent: REINFORCE
(policy gradient) on a categorical policy per search dimension, with a running-mean baseline
and advantages normalised by the running spread of the rewards (numpy only). The gradient is
taken for the widths actually evaluated (after enforcement), as HAQ stores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mico.search.dim_transform import DimTransform, SpaceSearcher
from mico.search.searchers import DEFAULT_QTYPES


class HAQSearcher(SpaceSearcher):
    """HAQ-style RL: REINFORCE over per-layer widths with HAQ's budget enforcement.

    Episodes run until ``n_inits + n_iterations`` distinct schemes are evaluated (a scheme seen
    before is not evaluated again but still rewards the policy), at most
    ``EPISODES_PER_EVALUATION`` times that many episodes. ``lr`` is the policy's step, ``decay``
    the baseline's memory."""

    EPISODES_PER_EVALUATION = 20

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        lr: float = 0.5,
        decay: float = 0.8,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )
        self.lr = float(lr)
        self.decay = float(decay)
        self.logits = np.zeros((self.dim, self.m))
        self.rewards: list[float] = []

    def policy(self) -> np.ndarray:
        """Each dimension's width probabilities (rows)."""
        z = np.exp(self.logits - self.logits.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def enforce(self, k: Sequence[int], constraint_type: str, budget: float) -> np.ndarray:
        """HAQ's budget enforcement: lower the widths layer by layer until the scheme fits."""
        return self.repair(k, constraint_type, budget, order="cyclic")

    def episode(self, constraint_type: str, budget: float) -> np.ndarray:
        """Walk the dimensions, sampling each width from the policy; then enforce the budget."""
        probs = self.policy()
        k = np.array([self.rng.choice(self.m, p=probs[d]) for d in range(self.dim)], dtype=int)
        self._draws += 1
        self._feasible_draws += int(self.costs_of(k, constraint_type)[0] <= budget)
        return self.enforce(k, constraint_type, budget)

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        mean = var = None
        wanted = max(1, self.n_inits) + n_iterations
        episodes = 0
        # a repeated scheme costs no evaluation (its reward is known) but still teaches the
        # policy: episodes go on until ``wanted`` distinct schemes are evaluated, bounded
        while len(self.evaluated) < wanted and episodes < self.EPISODES_PER_EVALUATION * wanted:
            episodes += 1
            k = self.episode(constraint_type, budget)
            reward = self.evaluate_k(k, objective, constraint_type)
            self.rewards.append(reward)
            if mean is None or var is None:
                mean, var = reward, 0.0
                continue
            advantage = (reward - mean) / np.sqrt(var + 1e-8) if var > 0 else 0.0
            grad = -self.policy()  # d log pi(k_d) / d logits_d = onehot(k_d) - pi_d
            grad[np.arange(self.dim), k] += 1.0
            self.logits += self.lr * float(np.clip(advantage, -3, 3)) * grad
            var = self.decay * var + (1 - self.decay) * (reward - mean) ** 2
            mean = self.decay * mean + (1 - self.decay) * reward
