"""Learning from the robot's own episodes (issue 22): credit, critics and weights shared by RL-100 and HABC."""
