"""The Arrow exchange confs of a query's session clone (``runtime.arrow_exchange``)."""

from statestream.runtime.arrow_exchange import ARROW_MAX_BYTES_PER_BATCH, NO_BYTE_LIMIT, arrow_exchange_confs


def test_the_byte_limit_is_lifted_when_the_user_did_not_set_it():
    assert arrow_exchange_confs(lambda key: False) == {ARROW_MAX_BYTES_PER_BATCH: NO_BYTE_LIMIT}
    # Spark's writer skips its per-row size check only at exactly Int.MaxValue
    assert int(NO_BYTE_LIMIT) == 2147483647


def test_a_byte_limit_the_user_set_is_kept():
    asked = []

    def user_set(key: str) -> bool:
        asked.append(key)
        return key == ARROW_MAX_BYTES_PER_BATCH

    assert arrow_exchange_confs(user_set) == {}
    assert asked == [ARROW_MAX_BYTES_PER_BATCH]
