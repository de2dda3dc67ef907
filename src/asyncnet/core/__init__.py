"""The runtime core: definitions, the operator registry, the workspace and the net builder."""
