"""Stage A (and Stage B) evaluation: cached greedy generations, then parsing (docs/PROTOCOL.md §13)."""
