"""Physics backends that step a registered task in batches (MuJoCo CPU); L2, import reflexlab and sim only."""
