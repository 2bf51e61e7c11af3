"""Developer generators, run from a checkout (not shipped in the wheel):

* ``gen_protocol_schema``: regenerates ``protocol/schema_data.json`` from Kafka's message
  definitions (``python tools/dev/gen_protocol_schema.py [--check]``; ``--check`` runs in CI).
* ``compat_table``: the README's client-suites table from ``compat_tests/*/results*.json``
  (``python tools/dev/compat_table.py [--check]``).
"""
