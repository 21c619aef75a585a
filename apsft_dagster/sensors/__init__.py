"""Sensors (asset-check and run-failure alerts arrive with the evidence-seal stage)."""

sensors: list = []
