"""reflexlab core (L0): Spec, env protocol, config loader, atomic I/O, chunking, dataset format.

The core imports no other package of ours; its subpackages `reflexlab.tasks` and `reflexlab.ros` are L1
and `reflexlab.cli` is L5, the top (see DESIGN.md, checked by `lint-imports`).
"""

__version__ = "0.1.0"
