"""Why the main job's workloads do not take a branch of the machines (``devtools.branches.UNREACHED``).

Each reason names its kind first, one of:

* **vectors**: the code runs for the conformance vectors (their adapter parses JSON into states and
  commands) or for the checkers (decoding a history's recovery row); the engine builds states and
  commands as Python values and never calls it;
* **guard**: a check against a programming error: a value outside the range its type promises, a
  state the machine never reaches, a command in a state the engine never sends it in, a match that
  falls through every case.  The unit tests and vectors take it; a workload cannot without a broken
  engine;
* **not sent**: a command or option the simulated broker never uses (an admin or lifecycle command,
  a runtime switch), so no workload can take it without a new engine feature;
* **one coordinator** / **no owners**: the simulated broker runs one transaction coordinator, and
  its clients open transactions without an owner (authentication is off);
* **rare**: reachable by the workloads, not taken in the 300 histories of the main job (the
  condition needs a coincidence the fault mixes make rarely); said what it needs.

Keys: ``(module, function)`` for every unreached branch of the function, ``(module, function,
statement text)`` for one statement (the text as ``devtools.branches.branch_sites`` reads it).
"""

from __future__ import annotations

__all__ = ["REASONS"]

_VECTORS = (
    "vectors: the vectors' adapter and the checkers' decoding of JSON (a vector's init, a recovery row); "
    "the engine builds states and commands as Python values"
)
_RANGE = "guard: a value outside its type's range (a typed engine value is always in range); the unit tests take it"
_FALLTHROUGH = "guard: a match that fell through every case raises (a programming error); the engine's values are typed"
_STATE = "guard: a command in a state the engine never sends it in (it waits for the component to be ready first)"


def _not_sent(what: str) -> str:
    return f"not sent: {what}"


_BATCHED = "reference.batched_log"
_BUFFER = "reference.buffer"
_CLIENT = "reference.client"
_COORD = "reference.coordinator"
_DELAYED = "reference.delayed"
_BUCKET = "reference.delayed_bucket"
_COMMON = "reference.delayed_common"
_MEMORY = "reference.delayed_memory"
_RUNS = "reference.delayed_runs"
_PA = "reference.pending_ack"

REASONS: dict[tuple[str, str] | tuple[str, str, str], str] = {
    # --- batched_log -------------------------------------------------------------------------------
    (_BATCHED, "_decode_init"): _VECTORS,
    (_BATCHED, "_decode_recover"): _VECTORS,
    (_BATCHED, "sample_record"): "vectors: builds sample records of a given size for the vectors and benchmarks",
    (_BATCHED, "canonical_record"): (
        "guard: a record that starts with the batched-entry magic or lacks its op; the engine's machines "
        "serialize every record from its protobuf type"
    ),
    (_BATCHED, "_pop_write"): "guard: a write answered out of order; a managed ledger answers in issue order",
    (_BATCHED, "add_entry_complete"): "guard: one position written twice; a ledger gives every add a fresh one",
    (_BATCHED, "_flush"): _STATE + " (the engine never writes through a closed writer, BW-18)",
    (
        _BATCHED,
        "close",
    ): "guard: a writer closed twice; the engine closes a log's writer once, as its subscription goes",
    (_BATCHED, "finish_close"): (
        "guard and rare: a close finishing twice, or with a batch still waiting for its timer (the engine "
        "closes a writer as its subscription is deleted, after its last write)"
    ),
    (_BATCHED, "set_batched_write"): _not_sent("switching PIP-160 batching on or off at run time; a run fixes it"),
    (_BATCHED, "step", "case DeleteRecords():"): _not_sent("SetBatchedWrite, the command after it"),
    (_BATCHED, "step", "case SetBatchedWrite():"): _not_sent("SetBatchedWrite (switching batching at run time)"),
    (_BATCHED, "async_add_data", "if state.status is not _OPEN:"): _STATE + " (a write after close, BW-18)",
    (_BATCHED, "async_add_data", "if isinstance(record, DomainError):"): (
        "guard: a record the envelope cannot size (BW-7); the engine's machines write well-formed records"
    ),
    (_BATCHED, "timer_fired"): (
        "guard: the engine's batch timer fires only at the due time of a batch still waiting (a flush "
        "cancels it), so the no-batch, early and closed arms are for the vectors"
    ),
    (_BATCHED, "delete_records"): (
        "guard: deleting a record this writer did not write, with another batch size, or an index list; the "
        "engine deletes what its logs wrote, by the positions the writer gave"
    ),
    (_BATCHED, "read_entry"): "guard: a batch entry of no records; the writer never writes one",
    (_BATCHED, "recover_for"): "guard: a batch entry of no records, or records left after the last entry",
    (_BATCHED, "replay"): "not sent: a deleted entry; the engine replays the live entries its ledger reads back",
    # --- buffer ------------------------------------------------------------------------------------
    (_BUFFER, "_decode_init"): _VECTORS,
    (_BUFFER, "_recover_view"): _VECTORS,
    (_BUFFER, "decode_snapshot_records"): _VECTORS,
    (_BUFFER, "BufferState.__post_init__"): _RANGE,
    (_BUFFER, "classify_entry"): "guard: a transaction marker without a transaction id; the engine writes none",
    (_BUFFER, "initial"): "vectors: an initial state built as recovered (the vectors' init)",
    (_BUFFER, "_AbortedMessages.__call__"): (
        "not sent: the quirk abort-hides-committed (Pulsar's behaviour, off by default); the model checker runs it"
    ),
    (_BUFFER, "_obs_aborted"): "vectors: an observer of the vectors and the model checker",
    (_BUFFER, "SnapshotStore.apply"): (
        "vectors: the reference's own fold of snapshot effects, used by its recovery from records (vectors, "
        "model checker); the engine keeps the snapshot topics itself"
    ),
    (_BUFFER, "step", "case CompleteFirstSnapshot():"): _not_sent("the buffer's close, reload and clear commands"),
    (_BUFFER, "step", "case ReloadTopic():"): _not_sent(
        "ReloadTopic: the engine reloads a topic by crashing and loading it"
    ),
    (_BUFFER, "step", "case CloseTransactionBuffer():"): _not_sent(
        "CloseTransactionBuffer (the engine crashes a topic)"
    ),
    (_BUFFER, "step", "case ClearTransactionBufferSnapshot():"): _not_sent(
        "ClearTransactionBufferSnapshot (a topic's deletion; the workloads never delete a topic)"
    ),
    (_BUFFER, "_reload"): _not_sent("ReloadTopic"),
    (_BUFFER, "_clear"): _not_sent("ClearTransactionBufferSnapshot"),
    (_BUFFER, "_publish_message"): _not_sent("a publish to a closed buffer (the engine never closes one)"),
    (_BUFFER, "_end_guard"): _STATE + " (the engine queues an END_TXN_ON_PARTITION until the buffer is loaded)",
    (_BUFFER, "_commit_txn"): _STATE,
    (_BUFFER, "_abort_txn"): _STATE,
    (_BUFFER, "_start_recovery"): _STATE,
    (_BUFFER, "_complete_recovery"): (
        "guard and rare: completing a recovery twice; a recovery with appends pending (the engine recovers "
        "before it accepts appends)"
    ),
    (_BUFFER, "_complete_first_snapshot"): _STATE,
    (_BUFFER, "_delete_ledger"): (
        "guard: deleting a ledger that is not the first, or one holding entries above maxReadPosition (the "
        "engine's retention asks only for consumed ledgers)"
    ),
    (_BUFFER, "_first_ongoing"): "guard: called only with a transaction ongoing",
    (_BUFFER, "_handle_low_water_mark"): (
        "guard: the low-watermark loop is bounded by the transactions ongoing when it starts, each abort ending "
        "one, so it never finds the buffer unready or nothing ongoing"
    ),
    (_BUFFER, "_flush_pending"): "guard: a pending append the buffer refuses once ready (every one was accepted)",
    (_BUFFER, "_append_buffer_to_txn"): _STATE + " (an append to a buffer neither ready nor recovering)",
    (_BUFFER, "get_last_message_id"): _STATE,
    (_BUFFER, "_recover_with_effects", "if record is None:"): (
        "rare: a recovery from a segmented snapshot whose index still names a segment already trimmed "
        "(a crash between the segment's deletion and the index's rewrite); taken in an earlier measurement "
        "of the same seeds, not after the limits variant's new PIP-160 thresholds moved its timing"
    ),
    (_BUFFER, "_recover_with_effects"): "vectors: recovery from the segmented snapshot's records",
    # --- client ------------------------------------------------------------------------------------
    (_CLIENT, "_decode_init"): _VECTORS,
    (_CLIENT, "initial"): _RANGE,
    (_CLIENT, "_op_completed"): "guard: an operation answered that was never pending",
    (_CLIENT, "step"): _FALLTHROUGH + "; and the state-table check (TC-29), a programming error",
    (_CLIENT, "_end"): (
        "rare: a commit retried after an END_TXN answer that left it COMMITTING (an error other than the "
        "final ones; the simulated coordinator answers with those or not at all)"
    ),
    (_CLIENT, "_end_response"): (
        "guard and rare: an answer with no END_TXN sent; CoordinatorNotFound and the non-final errors (the "
        "simulated coordinator answers END_TXN with ok, TransactionNotFound or InvalidTxnStatus, or never)"
    ),
    # --- coordinator -------------------------------------------------------------------------------
    (_COORD, "_decode_init"): _VECTORS,
    (_COORD, "_decode_recover"): _VECTORS,
    (_COORD, "_read_log"): _VECTORS,
    (_COORD, "_u64"): _RANGE,
    (_COORD, "TxnLogRecord.__post_init__"): _RANGE,
    (_COORD, "TxnLogRecord.from_pb"): "guard: a log record without its op; the coordinator writes none",
    (_COORD, "initial"): _RANGE,
    (_COORD, "_meta_of"): "one coordinator: a transaction id of another coordinator never reaches coordinator 0",
    (_COORD, "_lookup"): "one coordinator: a transaction id of another coordinator never reaches coordinator 0",
    (_COORD, "_may_access"): "no owners: the clients open transactions without an owner (authentication off)",
    (_COORD, "_end_txn"): "no owners: ending another owner's transaction needs owners (authentication off)",
    (_COORD, "_add_to_txn", "if not _may_access(state, found, cmd.caller):"): (
        "no owners: adding to another owner's transaction needs owners (authentication off)"
    ),
    (_COORD, "_add_to_txn", "if (bad := _not_ready(state)) is not None:"): _STATE,
    (_COORD, "_new_txn", "if limit > 0 and len(state.txns) >= limit:"): (
        "rare: the limits variant caps open transactions at 6; four workers seldom hold that many at once"
    ),
    (_COORD, "_new_txn", "if (bad := _not_ready(state)) is not None:"): _STATE,
    (_COORD, "_new_txn", "if cmd.owner is not None and not cmd.owner.strip():"): "no owners: a blank owner name",
    (_COORD, "_not_ready"): _STATE,
    (_COORD, "_init_store"): _STATE,
    (_COORD, "_close_store"): _not_sent("CloseStore (the engine crashes a coordinator instead of closing it)"),
    (_COORD, "_log_closed"): _not_sent("TransactionLogClosed"),
    (_COORD, "_replay"): (
        "guard: a log record replayed out of place (a second NEW record, an update of an unknown or ended "
        "transaction, a transition the table forbids); the coordinator's own log holds none"
    ),
    (_COORD, "_replay_complete"): _STATE,
    (_COORD, "_update_txn_status"): (
        "guard and one coordinator: UpdateTxnStatus is sent only by the coordinator's own end, from the status "
        "it just read; another coordinator's id, a store not ready, a repeated or forbidden transition"
    ),
    (_COORD, "_end_transaction"): (
        "guard: an action other than commit or abort; a status update failing (retryably) right after the "
        "status was read in the same step"
    ),
    (_COORD, "_end_in_buffer_result"): (
        "rare: a participant's final error, or a retryable one the coordinator answers itself (the engine's "
        "participants answer ok, or time out)"
    ),
    (_COORD, "_tick"): _STATE + "; the phase-1 failure is a guard (an OPEN transaction's timeout cannot fail)",
    (_COORD, "_get_txn_meta"): _not_sent("GetTxnMeta (the admin API of serve asks it, not the simulated clients)"),
    (_COORD, "low_water_mark"): "guard: the mark is taken while the ending transaction is still in the table",
    (_COORD, "step", "case UpdateTxnStatus():"): _not_sent("UpdateTxnStatus as a command (the end steps it inside)"),
    (_COORD, "step", "case GetTxnMeta() | GetTxnStatus():"): _not_sent("the admin queries GetTxnMeta, GetTxnStatus"),
    (_COORD, "step", "case GetSlowTransactions():"): _not_sent("the admin query GetSlowTransactions"),
    (_COORD, "step", "case ReplayComplete():"): _not_sent("CloseStore and TransactionLogClosed, the commands after it"),
    (_COORD, "step", "case CloseStore():"): _not_sent("CloseStore"),
    (_COORD, "step", "case TransactionLogClosed():"): _not_sent("TransactionLogClosed"),
    # --- delayed -----------------------------------------------------------------------------------
    (_DELAYED, "_decode_init"): _VECTORS,
    (_DELAYED, "recover_from_json"): _VECTORS,
    (_DELAYED, "initial"): _FALLTHROUGH,
    (_DELAYED, "step"): _FALLTHROUGH,
    (_DELAYED, "contains_message"): "vectors: an observer of the vectors and the model checker",
    (_DELAYED, "next_delivery_time"): "vectors: an observer of the vectors and the model checker",
    (_DELAYED, "tracked"): "vectors: an observer of the vectors and the model checker",
    (_DELAYED, "bucket_ranges"): "vectors: an observer of the vectors and the model checker",
    (_DELAYED, "metrics"): "vectors: the in-memory tracker's metrics (the engine reads the bucket tracker's)",
    (_DELAYED, "_bucket_segments"): "vectors: an observer of the vectors and the model checker",
    (_COMMON, "check_max_messages"): _RANGE,
    (_COMMON, "check_position"): _RANGE,
    (_COMMON, "check_storage_operation"): (
        "guard: a storage failure of an operation the tracker has not (the fault schedule names only its four)"
    ),
    (_COMMON, "timer_fired"): "guard: a timer that fires for a target no longer armed (the engine cancels it)",
    (_MEMORY, "step"): (
        "not sent: the commands only a bucket tracker gets (MarkDelete, storage failures, a snapshot's completion "
        "or loss): the engine sends them to a bucket tracker alone, as Pulsar has no such calls on the in-memory "
        "tracker; the restart's other arm"
    ),
    (_BUCKET, "step"): _not_sent(
        "LoseBucketSnapshot (the engine's ledgers lose no snapshot); CompleteBucketSnapshot's other arm"
    ),
    (_BUCKET, "tracked"): "vectors: an observer of the vectors and the model checker",
    (_BUCKET, "contains_message"): "vectors: an observer of the vectors and the model checker",
    (_BUCKET, "_complete_create", "if cmd.request_id not in state.pending_creates:"): (
        "guard: a completion of no creation in flight (the service drops the completions of a tracker that "
        "restarted, DD-31)"
    ),
    (_BUCKET, "_complete_create"): (
        "rare (delayed_async): a creation finishing after its bucket left (a trim or a clear while it was in "
        "flight), or failing for a bucket whose messages were all delivered meanwhile"
    ),
    (_BUCKET, "_delete_snapshot"): (
        "rare: deleting a bucket with no snapshot (a memory-mode bucket trimmed or cleared), or whose cursor "
        "property another bucket took since (an orphan of a failed delete whose range a merge named again)"
    ),
    (_BUCKET, "_load_segment", "if snapshot is None:"): (
        "not sent: a load of a snapshot missing from storage (LoseBucketSnapshot; the engine's ledgers lose none)"
    ),
    (_BUCKET, "_trim", "if state.mark_delete_ledger < 0:"): (
        "not sent: a trim before any mark-delete (the engine hands a tracker its cursor's mark-delete ledger as "
        "it makes it)"
    ),
    (_BUCKET, "_trim"): (
        "rare: a bucket ending at or past the mark-delete ledger before one below it, a failing deletion "
        "(bucket_faults) during a trim"
    ),
    (_BUCKET, "_merge"): (
        "rare: a source's segment load failing past its retries during a merge (bucket_faults), a merge of "
        "nothing still tracked, a merged snapshot whose synchronous creation failed (bucket_faults)"
    ),
    (_BUCKET, "select_merge"): "guard and rare: fewer than two buckets to merge; ties between candidates",
    (_BUCKET, "_seal"): "rare: sealing with nothing left, or at most the buckets allowed after a merge",
    (_BUCKET, "_add"): (
        "rare: a due add of a position no longer tracked, an add whose position another bucket or the mutable one "
        "already holds below the mutable bucket's range"
    ),
    (_BUCKET, "_clear"): (
        "rare: a clear (a seek or an unsubscribe, DD-23) while sealed buckets exist: the delayed workload never "
        "seeks, and its readers unsubscribe (unsubscribe variant) once they drained the topic"
    ),
    (_BUCKET, "_parse_key"): "guard: a cursor property that is not a bucket key; the engine writes only bucket keys",
    (_BUCKET, "boundary_owner"): "guard: a boundary with no ledger",
    (_BUCKET, "recover", "if parsed is None:"): (
        "guard: a cursor property that is not a bucket key (the service hands recovery only bucket keys)"
    ),
    (_BUCKET, "recover"): (
        "rare (bucket_faults): recovery from cursor properties that overlap (a merge whose source's delete failed "
        "for good, then a reload of the topic)"
    ),
    (_RUNS, "Run.index"): "rare: a run packed 24 bytes wide (indexes past 32-bit deltas); the workloads' fit in 12",
    (_RUNS, "Run.head_ts"): "rare: a run packed 24 bytes wide (indexes past 32-bit deltas)",
    (_RUNS, "compact_run"): "rare: a run of no indexes, or one needing 24-byte packing",
    (_RUNS, "insert_sorted"): "guard: inserting into an empty run (callers start a new run instead)",
    (_RUNS, "merge_runs"): "rare: merging runs of 4,096 indexes or more (the workloads' are smaller)",
    (_RUNS, "difference"): "guard: a bitmap difference that does not partition its input",
    # --- pending_ack -------------------------------------------------------------------------------
    (_PA, "_decode_init"): _VECTORS,
    (_PA, "_follow_cursor", "if cmd.mark_delete_position <= cursor.mark_delete_position:"): (
        "guard: the engine steps FollowCursor only when the durable cursor's mark-delete position is past the "
        "view's (engine/broker/subscription.py); the vectors take the arm that changes nothing (PA-3)"
    ),
    (_PA, "_decode_recover"): _VECTORS,
    (_PA, "_read_log"): _VECTORS,
    (_PA, "AckedPosition.__post_init__"): _RANGE,
    (_PA, "AckedPosition.of_indexes"): _RANGE,
    (_PA, "PendingAckRecord.from_pb"): "guard: a log record without its field; the handle writes none",
    (_PA, "log_index_lag_backoff"): _RANGE + " (broker.conf's lags are validated)",
    (_PA, "message_state"): _RANGE,
    (_PA, "_indexes"): "vectors: lists an ack set's indexes for the vectors' observers",
    (_PA, "surviving_records"): "vectors: the records a sequence of effects leaves in the log (vectors' helper)",
    (_PA, "step", "case RetryPendingAckInit():"): _not_sent("ClosePendingAckHandle, ReloadSubscription (after it)"),
    (_PA, "step", "case ClosePendingAckHandle():"): _not_sent(
        "ClosePendingAckHandle (the engine crashes a subscription)"
    ),
    (_PA, "step", "case ReloadSubscription():"): _not_sent("ReloadSubscription (the engine reloads by crashing)"),
    (_PA, "_txn_command"): _STATE + "; an ERROR or CLOSED handle (the engine never closes one)",
    (_PA, "_init_complete"): _STATE,
    (_PA, "_init_failed"): _STATE + "; a failure that is not retryable (the engine's store failures are)",
    (_PA, "_retry_init"): _STATE,
    (_PA, "_reset_cursor"): (
        "guard and rare: a seek (PA-22) on an ERROR, CLOSED or initializing handle, or while transactions hold "
        "acks (the workloads seek only Readers, which hold none)"
    ),
    (_PA, "check_position_in_pending_ack_state"): (
        "rare: the admin check (queries variant) of a position at or below the mark-delete position, out of "
        "a batch, or on a handle not ready (it asks of the position the open transaction just acked)"
    ),
    (_PA, "_cumulative_conflict"): (
        "rare: a transactional cumulative ack of an empty ack set (the client sends none), or a transaction "
        "moving its own cumulative slot on (the acks variant acks the same message again, refused as not "
        "above its own; the processors end a transaction after one cumulative ack)"
    ),
    (_PA, "_ignored_cumulative"): "guard: a cumulative ack of other than one message id (the client sends one)",
    (_PA, "_individual_checked"): "rare: an individual ack of an empty ack set, replayed from the log over a conflict",
    (_PA, "_individual_ack"): "rare: an individual transactional ack whose positions were all deleted already",
    (_PA, "_normal_ack"): "rare: a plain ack of an ack set with nothing acked",
    (_PA, "_normalize_cursor"): "rare: a cursor that was already normal",
    (_PA, "_cursor_delete_distinct"): "rare: batch-index deletes merging into an entry's existing ack set",
    (_PA, "_strip_map"): "rare: a pending batch ack whose indexes the cursor partly deleted",
    (_PA, "_release"): "guard: releasing a position nothing holds",
    (_PA, "_without"): "guard: removing a transaction from an order it is not in",
    (_PA, "_union"): "rare: a union of a whole-entry ack with an index ack",
    (_PA, "AckBits.overlaps"): "rare: an overlap test of an empty ack set",
    (_PA, "recover"): "guard and rare: a record already trimmed by the log's mark-delete; recovery without a record id",
    (_PA, "replay_record"): "rare: replaying a record the live state refuses (the log holds only accepted records)",
}
