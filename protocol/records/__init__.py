"""Record batches (v2), legacy message sets (v0/v1), CRCs and compression codecs: sans-IO.

Modules: header (61-byte v2 header), batch (build/validate/stamp/decode v2), legacy
(message sets and conversions), compression (codecs), crc, varint, errors.
"""
