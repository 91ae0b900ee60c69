"""Host-side reports made from the validator's JSON: plots need matplotlib, so they live here, not in
validators/ (which is standard library only)."""
