"""Defaults that real-world RL's rounds, `reflexlab rl` and `bench realrl` share, free of torch so the CLI can show
them.

* ``TARGET_KL``: chain PPO's early stop per iteration (`policies.rl.chain_ppo.PpoConfig.target_kl` says why it
  needs one).
* ``MAX_ACTION_SHIFT``: the trust region of every RL-100 round (`policies.rl.rl100.Rl100Config.max_action_shift`,
  the reason in `policies.rl.ope`), in the data's action std.
* ``HEAD_STEPS``: optimiser steps of the one-step head's distillation (`policies.rl.head.head_train` says why so
  many).
"""

TARGET_KL = 0.01
MAX_ACTION_SHIFT = 0.02
HEAD_STEPS = 20_000
