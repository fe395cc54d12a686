"""reflexlab core: the Spec, configs, episode format and the CLI. Imports nothing heavy."""

__version__ = "0.1.0"
