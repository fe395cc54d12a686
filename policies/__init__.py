"""Learning (L3): methods, PPO (rsl-rl), training loops, evaluation, checkpoints.

May import sim, real, teleop and reflexlab (L0-L2), never deploy; never talks to hardware or ROS.
"""
