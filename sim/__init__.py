"""Simulation: tasks (one folder per robot), backends, and the rsl-rl VecEnv adapter."""
