"""One module per section of a profile, named after its YAML key, each holding that section's model(s)."""
