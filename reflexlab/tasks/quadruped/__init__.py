"""The reflexlab quadruped and `quadruped-walk` without a simulator: constants, observations, rewards, randomisation."""
