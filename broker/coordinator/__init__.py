"""The coordinators (group, transaction) over their common runtime port; they never import the broker core."""
