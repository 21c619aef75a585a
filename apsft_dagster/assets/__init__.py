"""One module per stage, named in the experiment's own words."""
