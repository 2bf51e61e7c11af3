"""The share coordinator's side of share groups: the persister port the share-partition leader writes
its state through (:mod:`.persister`), and its implementations."""
