"""Quirks on demand for ``txnmodel serve``: a broker that breaks one promise, so that every check of
``txnmodel verify`` has something to catch at a ``txnmodel record`` workload's default options.

A quirk is a fault the server injects on the wire, never a change to a machine: the broker's
decisions still come from the machines, and the quirk rewrites, holds back, answers or drops a
frame on its way in or out (an END_TXN that asked to abort reaches the coordinator as a commit; a
MESSAGE the dispatcher handed out is acknowledged by the server instead of sent).  Quirks are
switched on with the faults' spec, ``KIND=RATE`` (``--faults hide_message=0.1``); ``on`` never
includes them.  Each is drawn from the server's seeded random source and logged as a fault event.

======================  ===============================================================  ======================
quirk (value)           what the server does                                            the check it breaks
======================  ===============================================================  ======================
phantom_message         after a plain message on a Shared or Key_Shared subscription,   garbage-read
                        sends the consumer one nobody sent (the payload with a suffix,
                        at an entry that does not exist); its acks are swallowed
misplace_receipt        the SEND_RECEIPT of a message sent alone (not in a batch) names  inconsistent-position
                        the entry after the one written, so two sends name one
                        position (below 1: at 1 every receipt moves and no two agree;
                        forward and unbatched, the positions keep the sends' order)
swap_positions          (on at any rate > 0) the two halves of every block of 16        realtime-order
                        entries swap positions (entry id XOR 8 in receipts, messages,
                        acks and redelivery requests) and a consumer gets each block
                        in the order shown: consistent, except that a send that
                        completed first may name the later position
reorder_dispatch        a Key_Shared consumer gets the next entry of a key before the   out-of-order-delivery
                        one drawn to wait for it (up to 500 ms)
hide_message            a plain message (not batched, not delayed, not in a             lost-message
                        transaction) is acknowledged by the server instead of sent
ignore_delay            a SEND's deliver-at time is dropped: delivered at once          early-delivery
deliver_late_ms         (milliseconds) added to every SEND's deliver-at time            late-delivery
ignore_redelivery       REDELIVER_UNACKNOWLEDGED_MESSAGES is ignored: a negatively      lost-redelivery
                        acknowledged or timed-out message never comes back
commit_aborts           an END_TXN that asks to abort reaches the coordinator as a      aborted-read
                        commit (the client is told its abort succeeded)
expose_open_txns        a transaction's messages (the transactions drawn) are stored    premature-read (and
                        outside it: dispatched at once, before any commit               aborted-read for those
                                                                                        that then abort)
hide_txn_message        a transaction's second and later messages on a partition are   fractured-read
                        acknowledged away on a subscription that got its first
lose_txn_acks           an ACK inside a transaction is answered ok and never made:      duplicate-after-commit
                        after the commit the message is still unacknowledged
end_twice               a second END_TXN of a transaction that already ended is         commit-and-abort
                        answered ok instead of the coordinator's refusal
======================  ===============================================================  ======================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.broker import Delivered, SubscriptionService
from engine.scheduler import Simulation
from engine.serve.connection import Connection, Consumer
from spec.frame import Frame, decode_message, encode_command, encode_frame, encode_message
from spec.pb import PulsarApi_pb2 as api

__all__ = ["MILLISECOND_QUIRKS", "QUIRKS", "Quirks"]

log = logging.getLogger("runners.serve.faults")

T = api.BaseCommand

# Every quirk and the check of ``txnmodel verify`` it breaks (docs/serve.md, "Quirks").
QUIRKS: dict[str, str] = {
    "phantom_message": "garbage-read",
    "misplace_receipt": "inconsistent-position",
    "swap_positions": "realtime-order",
    "reorder_dispatch": "out-of-order-delivery",
    "hide_message": "lost-message",
    "ignore_delay": "early-delivery",
    "deliver_late_ms": "late-delivery",
    "ignore_redelivery": "lost-redelivery",
    "commit_aborts": "aborted-read",
    "expose_open_txns": "premature-read",
    "hide_txn_message": "fractured-read",
    "lose_txn_acks": "duplicate-after-commit",
    "end_twice": "commit-and-abort",
}
# Quirks whose value is milliseconds, not a rate.
MILLISECOND_QUIRKS = frozenset({"deliver_late_ms"})

# A phantom message sits this far after the entry it follows (no ledger of a run reaches it).
_FAR = 1 << 32
# How long the first half of a block waits for its second half before it goes out anyway.
_HOLD_MS = 500
# swap_positions swaps the halves of each block of this many entries: wide enough that one
# writer's send lands in one half and a later one in the other, with a few writers at once.
_SWAP_BLOCK = 16


@dataclass
class _Held:
    """The frames of a block's first half, waiting for its second half (``reorder_dispatch``,
    ``swap_positions``)."""

    block: tuple[str, int, int | str | None]  # the partition, and ledger and block number, or -1 and a key
    frames: list[bytes]
    conn: Connection
    consumer: Consumer


class Quirks:
    """The quirks switched on in ``rates`` (see the module docstring); ``injected`` logs one act."""

    def __init__(self, rates: dict[str, float], *, sim: Simulation, injected: Callable[[str, str], None]) -> None:
        self.rates = {kind: rates[kind] for kind in QUIRKS if rates.get(kind)}
        self.sim = sim
        self.rng = sim.rng
        self.injected = injected
        self._phantoms: set[tuple[int, int]] = set()  # (ledger, entry) of the phantoms sent
        self._exposed: dict[tuple[int, int], bool] = {}  # transaction -> whether its messages are exposed
        self._first_seen: set[tuple[str, str, tuple[int, int]]] = set()  # (partition, subscription, txn)
        self._ended: set[tuple[int, int]] = set()  # transactions an END_TXN ended
        self._held: dict[int, _Held] = {}  # by the consumer's engine id
        self._alone: dict[tuple[str, int, int], bool] = {}  # (peer, producer, sequence id) of sends alone
        if self.rates.get("swap_positions"):
            injected("positions-swapped", "server")

    @property
    def active(self) -> bool:
        return bool(self.rates)

    def _chance(self, kind: str) -> bool:
        rate = self.rates.get(kind, 0.0)
        return rate > 0 and (rate >= 1 or self.rng.random() < rate)

    def _swapped(self, mid: Any) -> None:
        if self.rates.get("swap_positions"):
            mid.entryId ^= _SWAP_BLOCK // 2

    # -- requests on their way in -----------------------------------------------------------------

    def inbound(self, conn: Connection, command: Any, frame: Frame | None) -> bool:
        """Rewrite a request in place; True when a quirk took it (dropped, or answered here)."""
        if not self.rates:
            return False
        kind = command.type
        if kind == T.SEND and frame is not None and frame.message is not None:
            self._on_send(conn, command.send, frame.message.metadata)
        elif kind == T.ACK:
            return self._ack(conn, command.ack)
        elif kind == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            if self._chance("ignore_redelivery"):
                self.injected("redelivery-ignored", conn.peer)
                return True
            for mid in command.redeliverUnacknowledgedMessages.message_ids:
                self._swapped(mid)
        elif kind == T.END_TXN and command.endTxn.txn_action == api.ABORT and self._chance("commit_aborts"):
            command.endTxn.txn_action = api.COMMIT
            self.injected("abort-committed", conn.peer)
        return False

    def _on_send(self, conn: Connection, send: Any, metadata: Any) -> None:
        if self.rates.get("misplace_receipt") and not metadata.HasField("num_messages_in_batch"):
            self._alone[(conn.peer, send.producer_id, send.sequence_id)] = True
        if metadata.HasField("deliver_at_time"):
            if self._chance("ignore_delay"):
                metadata.ClearField("deliver_at_time")
                self.injected("delay-ignored", conn.peer)
            elif self.rates.get("deliver_late_ms"):
                metadata.deliver_at_time += int(self.rates["deliver_late_ms"])
                self.injected("delivery-delayed", conn.peer)
        if send.HasField("txnid_most_bits") and self.rates.get("expose_open_txns"):
            txn = (send.txnid_most_bits, send.txnid_least_bits)
            if txn not in self._exposed:
                self._exposed[txn] = self._chance("expose_open_txns")
            if self._exposed[txn]:
                send.ClearField("txnid_most_bits")
                send.ClearField("txnid_least_bits")
                self.injected("txn-message-exposed", conn.peer)

    def _ack(self, conn: Connection, ack: Any) -> bool:
        if ack.HasField("txnid_most_bits") and self._chance("lose_txn_acks"):
            self.injected("txn-ack-lost", conn.peer)
            self._answer_ack(conn, ack)
            return True
        if self._phantoms:
            kept = [mid for mid in ack.message_id if (mid.ledgerId, mid.entryId) not in self._phantoms]
            if len(kept) < len(ack.message_id):
                del ack.message_id[:]
                ack.message_id.extend(kept)
                if not kept:
                    self._answer_ack(conn, ack)
                    return True
        for mid in ack.message_id:
            self._swapped(mid)
        return False

    @staticmethod
    def _answer_ack(conn: Connection, ack: Any) -> None:
        """An ACK the server took: answered ok when the client waits for an answer (a request id)."""
        if not ack.HasField("request_id"):
            return
        response = api.CommandAckResponse(consumer_id=ack.consumer_id, request_id=ack.request_id)
        if ack.HasField("txnid_most_bits"):
            response.txnid_most_bits, response.txnid_least_bits = ack.txnid_most_bits, ack.txnid_least_bits
        conn.send(encode_command(T(type=T.ACK_RESPONSE, ackResponse=response)))

    # -- responses on their way out ---------------------------------------------------------------

    def response(self, conn: Connection, command: Any) -> None:
        """Rewrite a response in place (a receipt's position, an END_TXN's refusal)."""
        if not self.rates:
            return
        if command.type == T.SEND_RECEIPT:
            mid = command.send_receipt.message_id
            self._swapped(mid)
            receipt = command.send_receipt
            alone = self._alone.pop((conn.peer, receipt.producer_id, receipt.sequence_id), False)
            if alone and self._chance("misplace_receipt"):
                mid.entryId += 1
                self.injected("receipt-misplaced", conn.peer)
        elif command.type == T.END_TXN_RESPONSE:
            body = command.endTxnResponse
            txn = (body.txnid_most_bits, body.txnid_least_bits)
            if not body.HasField("error"):
                self._ended.add(txn)
            elif txn in self._ended and self._chance("end_twice"):
                body.ClearField("error")
                body.ClearField("message")
                self.injected("second-end-accepted", conn.peer)

    # -- messages on their way out ----------------------------------------------------------------

    def dispatch(
        self,
        conn: Connection,
        consumer: Consumer,
        sub: SubscriptionService,
        group: list[Delivered],
        command: Any,
        stored: bytes,
    ) -> None:
        """Send (or hold, or hide) one MESSAGE the dispatcher handed out: ``command`` for the entry
        ``stored`` holds, carrying ``group``.  Its permits are spent already; a hidden one gets
        them back."""
        first = group[0]
        whole = first.batch_index is None
        if whole and self._hidden(consumer, first):
            consumer.permits += 1
            sub.acknowledge(consumer.engine_id, first.position, None, False)
            return
        self._swapped(command.message_id)
        frames = [encode_frame(T(type=T.MESSAGE, message=command), stored)]
        # Only where no ack is cumulative: a client that acknowledged a phantom cumulatively would
        # take every later message for one acknowledged already, and drop it.
        shared = sub.sub_type.name in ("Shared", "Key_Shared")
        if whole and shared and first.txn_id is None and self._chance("phantom_message"):
            frames.append(self._phantom(conn, consumer, command, stored))
        self._in_order_shown(conn, consumer, sub, first, frames)

    def _hidden(self, consumer: Consumer, first: Delivered) -> bool:
        if first.redelivery_count > 0:
            return False
        if first.txn_id is None:
            # not a delayed one either: it would be late as well as lost (late-delivery's to catch)
            if first.deliver_at is None and self._chance("hide_message"):
                self.injected("message-hidden", f"{consumer.partition}#{consumer.subscription}")
                return True
            return False
        if not self.rates.get("hide_txn_message"):
            return False
        key = (consumer.partition, consumer.subscription, (first.txn_id.most_sig_bits, first.txn_id.least_sig_bits))
        if key not in self._first_seen:
            self._first_seen.add(key)
            return False
        if self._chance("hide_txn_message"):
            self.injected("txn-message-hidden", f"{consumer.partition}#{consumer.subscription}")
            return True
        return False

    def _phantom(self, conn: Connection, consumer: Consumer, command: Any, stored: bytes) -> bytes:
        """A MESSAGE nobody sent: the entry's own message with a suffix to its payload, far past the
        entry (a permit is spent on it, as on any message)."""
        message = decode_message(stored, verify_checksum=False)
        phantom = api.CommandMessage()
        phantom.CopyFrom(command)
        phantom.message_id.entryId = command.message_id.entryId + _FAR
        self._phantoms.add((phantom.message_id.ledgerId, phantom.message_id.entryId))
        consumer.permits = max(0, consumer.permits - 1)
        self.injected("phantom-message", conn.peer)
        body = encode_message(message.metadata, message.payload + b"~phantom")
        return encode_frame(T(type=T.MESSAGE, message=phantom), body)

    def _in_order_shown(
        self, conn: Connection, consumer: Consumer, sub: SubscriptionService, first: Delivered, frames: list[bytes]
    ) -> None:
        """Send the frames of one entry, or hold them (``swap_positions``, ``reorder_dispatch``)."""
        if self.rates.get("swap_positions"):
            position = first.position
            self._hold_until(
                conn,
                consumer,
                frames,
                (consumer.partition, position.ledger_id, position.entry_id // _SWAP_BLOCK),
                first_half=position.entry_id % _SWAP_BLOCK < _SWAP_BLOCK // 2,
                last=position.entry_id % _SWAP_BLOCK == _SWAP_BLOCK - 1,
            )
        elif self.rates.get("reorder_dispatch") and sub.sub_type.name == "Key_Shared":
            self._reorder_by_key(conn, consumer, first, frames)
        else:
            self._emit(conn, frames)

    def _hold_until(
        self,
        conn: Connection,
        consumer: Consumer,
        frames: list[bytes],
        block: tuple[str, int, int | str | None],
        *,
        first_half: bool,
        last: bool,
    ) -> None:
        """``swap_positions``: the entries of a block's first half wait until its second half went
        out (or an entry of another block comes, or :data:`_HOLD_MS` passed), so a consumer gets
        the block in the order its positions are shown."""
        held = self._held.get(consumer.engine_id)
        if held is not None and held.block != block:
            self._flush(consumer.engine_id, held)
            held = None
        if first_half:
            if held is None:
                held = self._wait(conn, consumer, block)
            held.frames.extend(frames)
            return
        self._emit(conn, frames)
        if held is not None and last:
            self._flush(consumer.engine_id, held)

    def _reorder_by_key(self, conn: Connection, consumer: Consumer, first: Delivered, frames: list[bytes]) -> None:
        """``reorder_dispatch``: a Key_Shared consumer gets the next entry of a key before the one
        held for it (an entry of a batch goes by its first message's key, as the dispatcher routes
        it).  Only there: a consumer that acknowledges cumulatively (Exclusive, Failover) would
        drop the held entry as acknowledged already, a loss rather than a reordering."""
        block = (consumer.partition, -1, first.partition_key)
        held = self._held.get(consumer.engine_id)
        if held is not None and held.block == block:
            self._emit(conn, frames)
            self._flush(consumer.engine_id, held)
            self.injected("dispatch-reordered", f"{consumer.partition}#{consumer.subscription}")
            return
        if held is None and self._chance("reorder_dispatch"):
            self._wait(conn, consumer, block).frames.extend(frames)
            return
        self._emit(conn, frames)

    def _wait(self, conn: Connection, consumer: Consumer, block: tuple[str, int, int | str | None]) -> _Held:
        held = _Held(block, [], conn, consumer)
        self._held[consumer.engine_id] = held
        self.sim.schedule(_HOLD_MS, lambda: self._flush(consumer.engine_id, held))
        return held

    def _flush(self, engine_id: int, held: _Held) -> None:
        if self._held.get(engine_id) is held:
            del self._held[engine_id]
            self._emit(held.conn, held.frames, held.consumer)

    @staticmethod
    def _emit(conn: Connection, frames: list[bytes], consumer: Consumer | None = None) -> None:
        if consumer is not None and consumer.closed:
            return  # it left: the dispatcher hands what it held to another consumer
        for data in frames:
            conn.send(data)
