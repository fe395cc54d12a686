"""Real-world RL's two processes: the actor (robot side: env, policy, recorder) and the learner (updates, export).

They meet only through the dataset folder (`reflexlab.dataset`, crash-safe, committed episode by episode) and the
policy folder (`deploy.policy_store`), so they can run on two machines over a shared or synced folder.
"""
