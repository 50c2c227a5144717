"""Whole models: architectures, their graphs, the numpy oracle and
synthetic checkpoints."""
