"""Strom's wire protocol, sans-IO: schema, message codec, framing, connection, record batches.

Modules: ``protocol.schema`` (facts from Kafka's definitions), ``protocol.codec`` (encode/decode
requests and responses), ``protocol.framing`` and ``protocol.connection`` (byte stream to events, for
a server or a client: one ``Connection`` class for both roles),
``protocol.errors`` (error codes and exceptions), ``protocol.records`` (record batches).
"""
