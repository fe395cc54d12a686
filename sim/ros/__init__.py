"""L2: simulated robots behind the ROS 2 topics of the real ones (MuJoCo sim bridge, sim-as-real arm bridge)."""
