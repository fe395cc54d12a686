"""L4: the ROS 2 nodes that serve policies on a robot (policy node, recorder); plumbing comes from `reflexlab.ros`."""
