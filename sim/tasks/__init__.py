"""L2: the simulated side of each task (MuJoCo scene + batched env); `sim.registry` lists them."""
