"""The experiment's commands: run, export-bank, amend, report (each a module with `add_parser`)."""
