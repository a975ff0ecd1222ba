"""prmkit.rewards: process rewards for reinforcement learning (docs/rl.md).

    from prmkit.rewards import compute_step_rewards
    rewards = compute_step_rewards(scorer, prompts, completions, policy_tokenizer=tok)
    rewards[0].steps[0].probability, rewards[0].steps[0].policy_token_end, rewards[0].score

`contract`: the step-reward contract every adapter calls; `credit`: credit assignment (pure
functions from step rewards to per-token advantages); `diagnostics`: per-batch hacking
signals; `trl`, `verl`, `openrlhf`: the engines' entry points (imported on their own, so
that `import prmkit.rewards` needs none of those engines).
"""

from prmkit.rewards.contract import (
    CompletionRewards,
    PolicyTokens,
    StepReward,
    compute_step_rewards,
    step_spans,
)

__all__ = ["CompletionRewards", "PolicyTokens", "StepReward", "compute_step_rewards",
           "step_spans"]
