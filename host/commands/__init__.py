"""Subcommands of the fpgacnn CLI, one module each."""
