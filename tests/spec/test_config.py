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


def test_broker_conf_line_without_equals_is_reported_with_its_line() -> None:
    with pytest.raises(BadConfig, match="line 2"):
        Config.from_broker_conf("a=b\nnot a setting\n")


def test_config_is_hashable_and_immutable() -> None:
    config = Config()
    assert hash(config) == hash(Config())
    with pytest.raises(AttributeError):
        config.max_active_transactions_per_coordinator = 3  # type: ignore[misc]
