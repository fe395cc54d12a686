"""Hardware drivers and the real-robot Env (single env, same Spec as sim). No learning code here."""
