"""Pure functions over recordings: medians, deltas, server-side summaries. No I/O."""
