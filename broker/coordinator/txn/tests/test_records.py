"""`__transaction_state` record formats: golden bytes of Kafka's TransactionLogKey/Value (what
Strom cannot read: broker/coordinator/tests/test_loader.py, for both internal topics)."""

from __future__ import annotations

from strom.broker.coordinator.txn.records import TxnLogValue, decode_key, decode_value, encode_key, encode_value

ONGOING = TxnLogValue(7, 2, 60000, 1, {"b": [3, 1], "a": [0]}, 1000, 900)


def test_key_golden_bytes():
    assert encode_key("t").hex() == "0000000174"
    assert decode_key(encode_key("tx-1")) == "tx-1"


def test_value_v1_golden_bytes_sorted_partitions_and_no_tagged_defaults():
    assert encode_value(ONGOING).hex() == (
        "0001"
        "0000000000000007"
        "0002"
        "0000ea60"
        "01"
        "03"
        "0261"
        "02"
        "00000000"
        "00"
        "0262"
        "03"
        "00000001"
        "00000003"
        "00"  # compact [a:[0], b:[1,3]]
        "00000000000003e8"
        "0000000000000384"
        "00"
    )  # no tagged fields
    assert decode_value(encode_value(ONGOING)) == TxnLogValue(7, 2, 60000, 1, {"a": [0], "b": [1, 3]}, 1000, 900)


def test_value_v0_and_an_empty_id_with_null_partitions():
    v0 = encode_value(ONGOING, 0)
    assert v0.hex().startswith("0000000000000000000700020000ea600100000002000161")
    assert decode_value(v0) == TxnLogValue(7, 2, 60000, 1, {"a": [0], "b": [1, 3]}, 1000, 900)
    empty = encode_value(TxnLogValue(7, 2, 60000, 0, {}, 1000, -1))
    assert empty.hex() == "0001000000000000000700020000ea60000000000000000003e8ffffffffffffffff00"


def test_value_v1_tagged_fields_round_trip():
    value = TxnLogValue(
        7, 2, 60000, 4, {"a": [0]}, 1000, 900, previous_producer_id=6, next_producer_id=8, client_transaction_version=2
    )
    encoded = encode_value(value)
    assert encoded.hex().endswith("03000800000000000000060108000000000000000802020002")
    assert decode_value(encoded) == value
