"""Strom's wire protocol, sans-IO: schema, message codec, framing, connection, record batches.

Modules: ``protocol.schema`` (facts from Kafka's definitions), ``protocol.codec`` (encode/decode
requests and responses), ``protocol.framing`` and ``protocol.connection`` (byte stream to events),
``protocol.errors`` (error codes and exceptions), ``protocol.records`` (record batches).
"""
