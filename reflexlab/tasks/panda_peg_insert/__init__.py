"""`panda-peg-insert` without a simulator: constants, the noise config, Spec, observation, progress, scripted expert."""
