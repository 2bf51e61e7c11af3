"""The composition root and the network: the broker's services wired together, listeners, connections."""
