"""family.losses."""
