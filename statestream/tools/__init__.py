"""Operator tooling: reads and edits a checkpoint through the engine's own state and log classes."""
