"""RL-100's default limits on how far a round may move the policy, free of torch so the CLI can show them.

* ``TARGET_KL``: chain PPO's early stop per iteration (`policies.rl.chain_ppo.PpoConfig.target_kl` says why it
  needs one).
* ``MAX_ACTION_SHIFT``: the trust region of every round (`policies.rl.rl100.Rl100Config.max_action_shift`, the
  reason in `policies.rl.ope`), in the data's action std.
"""

TARGET_KL = 0.01
MAX_ACTION_SHIFT = 0.02
