"""Strom as the test broker: an embedded broker, a pytest plugin and fault injection."""
