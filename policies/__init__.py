"""Learning: PPO (rsl-rl), evaluation, checkpoints. Never talks to hardware or ROS."""
