"""L1: sim-free task definitions (constants, geometry, Spec, observation, reward, success, expert), one folder per task.

Shared by the simulator (`sim.tasks`), sim-as-real bridges and the robot's task adapters (`real.tasks`).
May import only the core (`reflexlab` L0), numpy and torch: never MuJoCo, ROS or hardware.
"""
