"""`panda-push-t` without a simulator: constants, T-block geometry, Spec and observation, modes, scripted expert."""
