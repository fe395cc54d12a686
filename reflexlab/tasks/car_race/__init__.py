"""`car-race` without a simulator: constants, procedural courses, the Spec and observation, the scripted driver."""
