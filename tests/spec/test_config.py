"""Config: broker.conf keys, Pulsar's defaults, validation that names the key."""

from __future__ import annotations

import pytest

from spec.config import Config
from spec.errors import BadConfig

# Pulsar's defaults as the fact sheets record them (ServiceConfiguration / broker.conf).
PULSAR_DEFAULTS = {
    "transactionCoordinatorEnabled": False,
    "maxActiveTransactionsPerCoordinator": 0,
    "transactionLogBatchedWriteEnabled": False,
    "transactionLogBatchedWriteMaxRecords": 512,
    "transactionLogBatchedWriteMaxSize": 4194304,
    "transactionLogBatchedWriteMaxDelayInMillis": 1,
    "transactionPendingAckBatchedWriteEnabled": False,
    "transactionPendingAckBatchedWriteMaxRecords": 512,
    "transactionPendingAckBatchedWriteMaxSize": 4194304,
    "transactionPendingAckBatchedWriteMaxDelayInMillis": 1,
    "transactionPendingAckLogIndexMinLag": 500,
    "transactionBufferSnapshotMaxTransactionCount": 1000,
    "transactionBufferSnapshotMinTimeInMillis": 5000,
    "transactionBufferSnapshotSegmentSize": 262144,
    "transactionBufferSegmentedSnapshotEnabled": False,
    "transactionBufferClientMaxConcurrentRequests": 1000,
    "transactionBufferClientOperationTimeoutInMills": 3000,
    "acknowledgmentAtBatchIndexLevelEnabled": True,
    "delayedDeliveryEnabled": True,
    "delayedDeliveryTickTimeMillis": 1000,
    "isDelayedDeliveryDeliverAtTimeStrict": False,
    "delayedDeliveryMinIndexCountPerBucket": 50000,
    "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds": 300,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 5000,
    "delayedDeliveryMaxNumBuckets": -1,
    "delayedDeliveryFixedDelayDetectionLookahead": 50000,
    "delayedDeliveryMaxDelayInMillis": 0,
    "maxMessageSize": 5242880,
    "allowAutoTopicCreation": True,
    "allowAutoTopicCreationType": "non-partitioned",
    "defaultNumPartitions": 1,
}


def test_defaults_are_pulsars() -> None:
    defaults = Config.defaults()
    for key, value in PULSAR_DEFAULTS.items():
        assert defaults[key] == value, key


def test_every_key_round_trips_through_its_broker_conf_name() -> None:
    config = Config()
    for key in Config.broker_conf_keys():
        assert config.get(key) == Config.defaults()[key]


def test_overrides_by_broker_conf_key() -> None:
    config = Config.from_mapping(
        {"maxActiveTransactionsPerCoordinator": 2, "transactionLogBatchedWriteEnabled": "true"}
    )
    assert config.max_active_transactions_per_coordinator == 2
    assert config.transaction_log_batched_write_enabled is True


def test_broker_conf_text() -> None:
    text = """
    # a comment
    transactionCoordinatorEnabled=true
    transactionLogBatchedWriteMaxRecords = 64
    someKeyWeDoNotModel=whatever
    superUserRoles=admin, proxy
    """
    config = Config.from_broker_conf(text)
    assert config.transaction_coordinator_enabled is True
    assert config.transaction_log_batched_write_max_records == 64
    assert config.super_user_roles == ("admin", "proxy")


@pytest.mark.parametrize(
    "overrides,key,fragment",
    [
        ({"maxActiveTransactionsPerCoordinator": -1}, "maxActiveTransactionsPerCoordinator", ">= 0"),
        ({"transactionLogBatchedWriteMaxRecords": "many"}, "transactionLogBatchedWriteMaxRecords", "integer"),
        ({"transactionCoordinatorEnabled": "yes"}, "transactionCoordinatorEnabled", "true or false"),
        ({"transactionCoordinatorEnable": True}, "transactionCoordinatorEnable", "did you mean"),
        (
            {"delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 0},
            "delayedDeliveryMaxIndexesPerBucketSnapshotSegment",
            "-1",
        ),
        ({"delayedDeliveryTickTimeMillis": True}, "delayedDeliveryTickTimeMillis", "expected int"),
    ],
)
def test_bad_values_name_the_key(overrides: dict[str, object], key: str, fragment: str) -> None:
    with pytest.raises(BadConfig) as info:
        Config.from_mapping(overrides)
    assert info.value.key == key
    assert fragment in str(info.value)


# A broker.conf as Pulsar ships and users edit it, using every syntax of java.util.Properties.
PULSAR_STYLE_CONF = (
    "### --- Transaction coordinator --- ###\n"
    "# Enable transaction coordinator in broker\n"
    "transactionCoordinatorEnabled=true\n"
    "! a comment in the other style\n"
    "   ! and an indented one\n"
    "maxActiveTransactionsPerCoordinator: 7\n"
    "transactionLogBatchedWriteEnabled true\n"
    "transactionLogBatchedWriteMaxRecords\t=\t64\n"
    "transactionLogBatchedWriteMaxSize   2\\\n"
    "      048\n"
    "transactionLogBatchedWriteMaxDelayInMillis=\\u0035\n"
    "delayedDeliveryTrackerFactoryClassName=org.apache.pulsar.broker.delayed.\\\n"
    "  BucketDelayedDeliveryTrackerFactory\n"
    "superUserRoles=admin,\\\n"
    "   proxy\n"
    "\n"
    "# Pulsar leaves many keys blank: a blank scalar keeps its default\n"
    "delayedDeliveryTickTimeMillis=\n"
    "transactionPendingAckLogIndexMinLag=1\n"
    "transactionPendingAckLogIndexMinLag=9\n"
    "someKeyWeDoNotModel=a value: with = signs\n"
    "brokerServicePort 6650\n"
    "transactionBufferSegmentedSnapshotEnabled:true\r\n"
    "transactionBufferSnapshotSegmentSize=1024\r"
    "transactionPendingAckBatchedWriteEnabled=true"
)


def test_broker_conf_reads_every_java_properties_syntax() -> None:
    config = Config.from_broker_conf(PULSAR_STYLE_CONF)
    assert config.transaction_coordinator_enabled is True  # key=value
    assert config.max_active_transactions_per_coordinator == 7  # key: value
    assert config.transaction_log_batched_write_enabled is True  # key value
    assert config.transaction_log_batched_write_max_records == 64  # tabs around =
    assert config.transaction_log_batched_write_max_size == 2048  # \ continuation, leading blanks dropped
    assert config.transaction_log_batched_write_max_delay_in_millis == 5  # \u0035
    assert (
        config.delayed_delivery_tracker_factory_class_name
        == "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
    )
    assert config.super_user_roles == ("admin", "proxy")
    assert config.delayed_delivery_tick_time_millis == 1000  # blank: the default
    assert config.transaction_pending_ack_log_index_min_lag == 9  # the last of two wins
    assert config.transaction_buffer_segmented_snapshot_enabled is True  # CRLF line end
    assert config.transaction_buffer_snapshot_segment_size == 1024  # CR line end
    assert config.transaction_pending_ack_batched_write_enabled is True  # no final line break


def test_broker_conf_line_of_any_text_is_a_key_as_in_java() -> None:
    # java.util.Properties reads "not a setting" as key "not", value "a setting": not an error
    assert Config.from_broker_conf("a=b\nnot a setting\n") == Config()


@pytest.mark.parametrize(
    "text,key,line,fragment",
    [
        ("# c\n! c\ntransactionLogBatchedWriteMaxRecords many\n", "transactionLogBatchedWriteMaxRecords", 3, "integer"),
        ("a=1\\\n  2\ntransactionCoordinatorEnabled: yes\n", "transactionCoordinatorEnabled", 3, "true or false"),
        ("\n\nmaxActiveTransactionsPerCoordinator=\\\n  -1\n", "maxActiveTransactionsPerCoordinator", 3, ">= 0"),
        ("x=1\r\ny=2\r\ndelayedDeliveryTickTimeMillis=\\u00zz\r\n", "delayedDeliveryTickTimeMillis", 3, "\\u00zz"),
    ],
)
def test_broker_conf_errors_name_the_key_and_its_line(text: str, key: str, line: int, fragment: str) -> None:
    with pytest.raises(BadConfig) as info:
        Config.from_broker_conf(text, where="conf/broker.conf")
    assert info.value.key == key
    assert f"conf/broker.conf line {line}" in str(info.value)
    assert fragment in str(info.value)


def test_config_is_hashable_and_immutable() -> None:
    config = Config()
    assert hash(config) == hash(Config())
    with pytest.raises(AttributeError):
        config.max_active_transactions_per_coordinator = 3  # type: ignore[misc]
