"""The server's wire vocabulary (engine.serve.wire), without a socket: message ids, ack sets,
request ids, the error answer each request kind gets, and the futures a request waits on."""

from __future__ import annotations

from typing import Any

import pytest

from engine.scheduler import Future
from engine.serve.wire import (
    COMMAND_FIELD,
    TXN_RESPONSES,
    RequestError,
    ack_set,
    error_response,
    first_error,
    java_long,
    message_id,
    position_of,
    request_id_of,
    set_bits,
    topic_name,
    wire_error,
)
from spec.errors import ServerError
from spec.pb import PulsarApi_pb2 as api
from spec.types import Position

T = api.BaseCommand


def test_an_entry_id_of_minus_one_travels_as_a_uint64_and_comes_back() -> None:
    mid = message_id(Position(3, -1))
    assert mid.entryId == (1 << 64) - 1
    assert position_of(mid) == Position(3, -1)
    assert java_long((1 << 63) - 1) == (1 << 63) - 1
    assert java_long(1 << 63) == -(1 << 63)


@pytest.mark.parametrize("size", [1, 5, 64, 65, 130])
def test_an_ack_set_names_exactly_its_indexes(size: int) -> None:
    for indexes in ([], [0], [size - 1], list(range(0, size, 3)), list(range(size))):
        assert set_bits(ack_set(indexes, size), size) == set(indexes)
    # a Java BitSet's words are signed: bit 63 set makes a negative word
    assert ack_set([63], 64) == [-(1 << 63)]


def test_a_request_id_is_read_from_the_command_it_belongs_to() -> None:
    lookup = T(type=T.LOOKUP, lookupTopic=api.CommandLookupTopic(topic="t", request_id=7))
    assert request_id_of(lookup) == 7
    flow = T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=10))
    assert request_id_of(flow) is None
    ack = T(type=T.ACK, ack=api.CommandAck(consumer_id=1, ack_type=api.CommandAck.Individual))
    assert request_id_of(ack) is None
    assert COMMAND_FIELD[T.SEND] == "send"


def _failed(kind: int, body: Any) -> Any:
    cmd = T(type=T.Type.ValueType(kind), **{COMMAND_FIELD[kind]: body})
    return error_response(kind, cmd, ServerError.TopicNotFound, "nope")


def test_each_kind_of_request_fails_with_its_own_response() -> None:
    metadata = _failed(T.PARTITIONED_METADATA, api.CommandPartitionedTopicMetadata(topic="t", request_id=1))
    assert metadata.type == T.PARTITIONED_METADATA_RESPONSE
    assert metadata.partitionMetadataResponse.response == api.CommandPartitionedTopicMetadataResponse.Failed
    assert metadata.partitionMetadataResponse.error == ServerError.TopicNotFound
    lookup = _failed(T.LOOKUP, api.CommandLookupTopic(topic="t", request_id=2))
    assert (lookup.type, lookup.lookupTopicResponse.request_id) == (T.LOOKUP_RESPONSE, 2)
    schema = _failed(T.GET_SCHEMA, api.CommandGetSchema(topic="t", request_id=3))
    assert (schema.type, schema.getSchemaResponse.error_message) == (T.GET_SCHEMA_RESPONSE, "nope")
    end = _failed(T.END_TXN, api.CommandEndTxn(request_id=4, txnid_most_bits=0, txnid_least_bits=9))
    assert end.type == TXN_RESPONSES[T.END_TXN][0]
    assert (end.endTxnResponse.txnid_least_bits, end.endTxnResponse.message) == (9, "nope")
    ack = _failed(T.ACK, api.CommandAck(consumer_id=5, ack_type=api.CommandAck.Individual, request_id=6))
    assert (ack.type, ack.ackResponse.consumer_id, ack.ackResponse.request_id) == (T.ACK_RESPONSE, 5, 6)
    other = _failed(T.SUBSCRIBE, api.CommandSubscribe(topic="t", subscription="s", request_id=8))
    assert (other.type, other.error.request_id, other.error.error) == (T.ERROR, 8, ServerError.TopicNotFound)


def test_a_bad_topic_name_is_the_requests_error() -> None:
    with pytest.raises(RequestError) as caught:
        topic_name("non-persistent://public/default/t")
    assert caught.value.code == ServerError.NotAllowedError
    assert wire_error(caught.value) == (ServerError.NotAllowedError, caught.value.message)


def test_first_error_waits_for_every_future_and_keeps_the_first_error_in_order() -> None:
    futures: list[Future[Any]] = [Future(), Future(), Future()]
    out = first_error(futures)
    futures[2].set_exception(RequestError(ServerError.UnknownError, "third"))
    futures[1].set_exception(RequestError(ServerError.UnknownError, "second"))
    assert not out.done
    futures[0].set_result(None)
    assert out.done and isinstance(out.error, RequestError) and out.error.message == "second"
    assert first_error([]).done
