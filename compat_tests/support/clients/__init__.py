"""One driver per real client library: produce records, read them back with assign().

Every driver module exposes the same functions (see ``base.Driver``) so the round-trip
tests can be parametrized over clients and codecs.
"""
