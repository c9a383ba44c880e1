import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * One transaction coordinator's metadata store, written from spec/rules/coordinator.md
 * (TC-1 .. TC-28): the store's lifecycle, the TxnStatus transitions, the log records it
 * writes, ending a transaction in three phases, timeouts, and recovery from its log.
 *
 * A step answers a Result: ok with a value, or an error name, and the effects it asked for,
 * spelled as the vectors spell them. The log is kept in this class's own format (one text
 * line per record, see Record.line) in {@link #log}; a crash keeps only the log and the
 * sequence-id interceptor's value, and {@link #recover} rebuilds the store from them.
 */
final class TxnCoordinator {
    static final long TIMEOUT_TRACKER_TICK_MS = 100; // TC-19
    static final long END_TXN_RETRY_INTERVAL_MS = 1000; // TC-16
    static final List<String> STATUSES = List.of("OPEN", "COMMITTING", "COMMITTED", "ABORTING", "ABORTED");
    static final Set<String> RETRYABLE = Set.of(
            "TransactionMetadataStoreState", "ServiceUnitNotReady", "PersistenceError", "RequestTimeout",
            "ManagedLedgerAlreadyClosed");

    /** The answer to one step. */
    static final class Result {
        final boolean ok;
        final Object value; // the ok value, or the error name
        final String message;
        final List<Object> effects;

        private Result(boolean ok, Object value, String message, List<Object> effects) {
            this.ok = ok;
            this.value = value;
            this.message = message;
            this.effects = effects;
        }

        static Result ok(Object value, List<Object> effects) {
            return new Result(true, value, "", effects);
        }

        static Result error(String name, String message, List<Object> effects) {
            return new Result(false, name, message, effects);
        }
    }

    /** Thrown by the helpers to refuse a step; the step's state stays as it was. */
    static final class Refusal extends Exception {
        final String name;
        final List<Object> effects;

        Refusal(String name, String message, List<Object> effects) {
            super(message);
            this.name = name;
            this.effects = effects;
        }

        Refusal(String name, String message) {
            this(name, message, new ArrayList<>());
        }
    }

    static final class Txn {
        final long seq;
        String status = "OPEN";
        final TreeSet<String> partitions = new TreeSet<>();
        final TreeSet<List<String>> subscriptions = new TreeSet<>(TxnCoordinator::compareSubscriptions);
        long timeoutMs;
        long startTime;
        long lastModified;
        String owner;
        final List<Long> recordIds = new ArrayList<>();

        Txn(long seq) {
            this.seq = seq;
        }

        Txn copy() {
            Txn t = new Txn(seq);
            t.status = status;
            t.partitions.addAll(partitions);
            t.subscriptions.addAll(subscriptions);
            t.timeoutMs = timeoutMs;
            t.startTime = startTime;
            t.lastModified = lastModified;
            t.owner = owner;
            t.recordIds.addAll(recordIds);
            return t;
        }
    }

    /** One TransactionMetadataEntry (TC-26): null is an absent optional field. */
    static final class Record {
        String op; // NEW, ADD_PARTITION, ADD_SUBSCRIPTION, UPDATE
        long most;
        long least;
        String expected;
        String next;
        List<String> partitions = new ArrayList<>();
        List<List<String>> subscriptions = new ArrayList<>();
        Long timeoutMs;
        Long startTime;
        Long lastModified;
        Long maxLocalTxnId;
        String owner;

        Map<String, Object> json() {
            List<Object> subs = new ArrayList<>(subscriptions);
            return Json.obj(
                    "@type", "TxnLogRecord",
                    "metadata_op", op,
                    "txn_id", List.of(most, least),
                    "expected_status", expected,
                    "new_status", next,
                    "partitions", new ArrayList<Object>(partitions),
                    "subscriptions", subs,
                    "timeout_ms", timeoutMs,
                    "start_time", startTime,
                    "last_modification_time", lastModified,
                    "max_local_txn_id", maxLocalTxnId,
                    "owner", owner);
        }

        @SuppressWarnings("unchecked")
        static Record of(Map<String, Object> json) {
            Record r = new Record();
            r.op = (String) json.get("metadata_op");
            List<Object> id = (List<Object>) json.get("txn_id");
            r.most = (Long) id.get(0);
            r.least = (Long) id.get(1);
            r.expected = (String) json.get("expected_status");
            r.next = (String) json.get("new_status");
            for (Object p : (List<Object>) json.getOrDefault("partitions", List.of())) {
                r.partitions.add((String) p);
            }
            for (Object s : (List<Object>) json.getOrDefault("subscriptions", List.of())) {
                List<Object> pair = (List<Object>) s;
                r.subscriptions.add(List.of((String) pair.get(0), (String) pair.get(1)));
            }
            r.timeoutMs = (Long) json.get("timeout_ms");
            r.startTime = (Long) json.get("start_time");
            r.lastModified = (Long) json.get("last_modification_time");
            r.maxLocalTxnId = (Long) json.get("max_local_txn_id");
            r.owner = (String) json.get("owner");
            return r;
        }

        /** This implementation's own durable format: the record as one JSON line. */
        String line() {
            return Json.write(json());
        }

        @SuppressWarnings("unchecked")
        static Record read(String line) {
            return of((Map<String, Object>) Json.parse(line));
        }
    }

    // --- configuration (broker.conf) and state ---------------------------------------------------

    long maxActive = 0;
    boolean authentication = false;
    boolean authorization = false;
    final Set<String> superUsers = new TreeSet<>();

    long coordinatorId;
    String storeState = "READY";
    long sequenceId = -1;
    long nextRecordId = 0;
    TreeMap<Long, Txn> txns = new TreeMap<>();
    long created, committed, aborted, timedOut;

    /** What survives a crash: the live records (by record id, in log order) and the interceptor's value. */
    final LinkedHashMap<Long, String> log = new LinkedHashMap<>();
    long lastMaxLocalTxnId = -1;

    static int compareSubscriptions(List<String> a, List<String> b) {
        int c = a.get(0).compareTo(b.get(0));
        return c != 0 ? c : a.get(1).compareTo(b.get(1));
    }

    // --- helpers ---------------------------------------------------------------------------------

    static List<Object> txnId(long most, long least) {
        return List.of(most, least);
    }

    static String spell(long most, long least) {
        return "(" + most + "," + least + ")";
    }

    static boolean canTransition(String from, String to) { // TC-6
        switch (from) {
            case "OPEN": return to.equals("OPEN") || to.equals("COMMITTING") || to.equals("ABORTING");
            case "COMMITTING": return to.equals("COMMITTING") || to.equals("COMMITTED");
            case "ABORTING": return to.equals("ABORTING") || to.equals("ABORTED");
            default: return to.equals(from);
        }
    }

    static boolean terminal(String status) {
        return status.equals("COMMITTED") || status.equals("ABORTED");
    }

    private Txn lookup(long most, long least) throws Refusal { // TC-3, TC-11
        if (most != coordinatorId) {
            throw new Refusal("CoordinatorNotFound", "transaction coordinator " + most + " is not loaded here");
        }
        Txn t = txns.get(least);
        if (t == null) {
            throw new Refusal("TransactionNotFound", "The transaction with this txdID `" + spell(most, least) + "` not found");
        }
        return t;
    }

    private void needReady() throws Refusal { // TC-2
        if (!storeState.equals("READY")) {
            throw new Refusal("TransactionMetadataStoreState",
                    "transaction metadata store " + coordinatorId + " is " + storeState + ", not Ready");
        }
    }

    private boolean mayAccess(Txn t, String caller) { // TC-12
        if (t.owner == null || t.owner.equals(caller)) {
            return true;
        }
        return authentication && authorization && caller != null && superUsers.contains(caller);
    }

    private Record record(String op, long least, long now) { // TC-26: every record has these two
        Record r = new Record();
        r.op = op;
        r.most = coordinatorId;
        r.least = least;
        r.lastModified = now;
        r.maxLocalTxnId = sequenceId;
        return r;
    }

    private Map<String, Object> append(long id, Record r) {
        return Json.obj("@type", "AppendRecord", "record_id", id, "record", r.json());
    }

    private static Map<String, Object> delete(List<Long> ids) {
        return Json.obj("@type", "DeleteRecords", "record_ids", new ArrayList<Object>(ids));
    }

    /** Carry out the log effects of an answered step on the durable log (TC-28). */
    void persist(Result result) {
        for (Object effect : result.effects) {
            @SuppressWarnings("unchecked")
            Map<String, Object> e = (Map<String, Object>) effect;
            if ("AppendRecord".equals(e.get("@type"))) {
                @SuppressWarnings("unchecked")
                Record r = Record.of((Map<String, Object>) e.get("record"));
                log.put((Long) e.get("record_id"), r.line());
                lastMaxLocalTxnId = r.maxLocalTxnId;
            } else if ("DeleteRecords".equals(e.get("@type"))) {
                for (Object id : (List<?>) e.get("record_ids")) {
                    log.remove((Long) id);
                }
            }
        }
    }

    long lowWaterMark() { // TC-17
        return txns.isEmpty() ? 0 : txns.firstKey() - 1;
    }

    // --- the lifecycle (TC-1) and replay (TC-21 .. TC-24) ----------------------------------------

    Result initStore(long maxLocal) throws Refusal {
        if (!storeState.equals("NONE")) {
            throw new Refusal("TransactionMetadataStoreState", "cannot init a store in state " + storeState);
        }
        storeState = "INITIALIZING";
        sequenceId = Math.max(sequenceId, maxLocal);
        return Result.ok(null, new ArrayList<>());
    }

    Result closeStore() throws Refusal {
        if (!(storeState.equals("NONE") || storeState.equals("INITIALIZING") || storeState.equals("READY"))) {
            throw new Refusal("TransactionMetadataStoreState", "cannot close a store in state " + storeState);
        }
        storeState = "CLOSING";
        return Result.ok(null, new ArrayList<>(List.of(Json.obj("@type", "CloseTransactionLog"))));
    }

    Result logClosed() throws Refusal {
        if (!storeState.equals("CLOSING")) {
            throw new Refusal("TransactionMetadataStoreState", "store is " + storeState + ", not Closing");
        }
        storeState = "CLOSE";
        return Result.ok(null, new ArrayList<>());
    }

    Result replay(long rid, Record r) throws Refusal {
        if (!storeState.equals("INITIALIZING")) {
            throw new Refusal("TransactionMetadataStoreState", "replay needs Initializing, store is " + storeState);
        }
        nextRecordId = Math.max(nextRecordId, rid + 1);
        if (r.maxLocalTxnId != null) {
            sequenceId = Math.max(sequenceId, r.maxLocalTxnId); // TC-23
        }
        List<Object> drop = new ArrayList<>(List.of(delete(List.of(rid))));
        Txn t = txns.get(r.least);
        if (r.op.equals("NEW")) {
            if (t != null) {
                t.recordIds.add(rid);
                return Result.ok(null, new ArrayList<>());
            }
            t = new Txn(r.least);
            t.startTime = r.startTime == null ? 0 : r.startTime;
            t.timeoutMs = r.timeoutMs == null ? 0 : r.timeoutMs;
            t.lastModified = r.lastModified == null ? t.startTime : r.lastModified;
            t.owner = r.owner;
            t.recordIds.add(rid);
            txns.put(r.least, t);
            sequenceId = Math.max(sequenceId, r.least);
            return Result.ok(null, new ArrayList<>());
        }
        if (t == null) {
            return Result.ok(null, drop); // TC-21: an orphan
        }
        long lastModified = r.lastModified == null ? t.lastModified : r.lastModified;
        if (r.op.equals("ADD_PARTITION") || r.op.equals("ADD_SUBSCRIPTION")) {
            if (!t.status.equals("OPEN")) {
                return Result.ok(null, drop); // TC-22
            }
            if (r.op.equals("ADD_PARTITION")) {
                t.partitions.addAll(r.partitions);
            } else {
                t.subscriptions.addAll(r.subscriptions);
            }
            t.recordIds.add(rid);
            t.lastModified = lastModified;
            return Result.ok(null, new ArrayList<>());
        }
        if (r.next == null || r.expected == null || !t.status.equals(r.expected) || !canTransition(t.status, r.next)) {
            return Result.ok(null, drop); // TC-22
        }
        t.recordIds.add(rid);
        if (terminal(r.next)) {
            txns.remove(r.least);
            return Result.ok(null, new ArrayList<>(List.of(delete(t.recordIds))));
        }
        t.status = r.next;
        t.lastModified = lastModified;
        return Result.ok(null, new ArrayList<>());
    }

    Result replayComplete() throws Refusal {
        if (!storeState.equals("INITIALIZING")) {
            throw new Refusal("TransactionMetadataStoreState", "store is " + storeState + ", not Initializing");
        }
        storeState = "READY";
        List<Object> effects = new ArrayList<>();
        for (Txn t : txns.values()) {
            if (t.status.equals("COMMITTING") || t.status.equals("ABORTING")) {
                String action = t.status.equals("COMMITTING") ? "COMMIT" : "ABORT";
                effects.add(resume(t.seq, action, false, 0));
            }
        }
        return Result.ok(null, effects);
    }

    private Map<String, Object> resume(long least, String action, boolean timeout, long delay) {
        return Json.obj("@type", "ScheduleResumeEndTxn", "txn_id", txnId(coordinatorId, least),
                "action", action, "is_timeout", timeout, "delay_ms", delay);
    }

    // --- the store's operations (TC-2 .. TC-12) --------------------------------------------------

    Result newTxn(long timeoutMs, long now, String owner) throws Refusal {
        if (maxActive > 0 && txns.size() >= maxActive) { // TC-4, before the Ready check
            throw new Refusal("ReachMaxActiveTxn", "New txn op reach max active txn! tcId : " + coordinatorId);
        }
        needReady();
        if (owner != null && owner.isBlank()) {
            throw new Refusal("IllegalArgument", "Owner can't be blank");
        }
        long seq = sequenceId + 1;
        sequenceId = seq;
        Record r = record("NEW", seq, now);
        r.startTime = now;
        r.timeoutMs = timeoutMs;
        r.owner = owner;
        Txn t = new Txn(seq);
        t.timeoutMs = timeoutMs;
        t.startTime = now;
        t.lastModified = now;
        t.owner = owner;
        long rid = nextRecordId++;
        t.recordIds.add(rid);
        txns.put(seq, t);
        created++;
        List<Object> effects = new ArrayList<>(List.of(append(rid, r)));
        if (timeoutMs < TIMEOUT_TRACKER_TICK_MS) { // TC-19
            effects.addAll(endTransaction(coordinatorId, seq, "ABORT", true, now).effects);
        }
        return Result.ok(txnId(coordinatorId, seq), effects);
    }

    Result addToTxn(boolean partition, long most, long least, List<?> names, long now, String caller)
            throws Refusal {
        Txn t = lookup(most, least);
        if (!mayAccess(t, caller)) {
            throw hidden(most, least, caller);
        }
        needReady();
        Record r = record(partition ? "ADD_PARTITION" : "ADD_SUBSCRIPTION", least, now);
        for (Object name : names) {
            if (partition) {
                r.partitions.add((String) name);
            } else {
                List<?> pair = (List<?>) name;
                r.subscriptions.add(List.of((String) pair.get(0), (String) pair.get(1)));
            }
        }
        long rid = nextRecordId;
        if (!t.status.equals("OPEN")) { // TC-10: logged, then deleted; the id is not used up
            throw new Refusal("InvalidTxnStatus", expectMessage(most, least, "OPEN", t.status),
                    new ArrayList<>(List.of(append(rid, r), delete(List.of(rid)))));
        }
        nextRecordId++;
        if (partition) {
            t.partitions.addAll(r.partitions);
        } else {
            t.subscriptions.addAll(r.subscriptions);
        }
        t.lastModified = now;
        t.recordIds.add(rid);
        return Result.ok(null, new ArrayList<>(List.of(append(rid, r))));
    }

    private static Refusal hidden(long most, long least, String caller) { // TC-12
        return new Refusal("TransactionNotFound",
                "Transaction " + spell(most, least) + " not found: " + caller + " is neither the owner nor a super user");
    }

    private static String expectMessage(long most, long least, String expected, String actual) {
        return "Expect Txn `" + spell(most, least) + "` to be in " + expected + " status but it is in " + actual + " status";
    }

    Result updateTxnStatus(long most, long least, String next, String expected, boolean timeout, long now)
            throws Refusal {
        if (most != coordinatorId) {
            throw new Refusal("CoordinatorNotFound", "transaction coordinator " + most + " is not loaded here");
        }
        needReady();
        Txn t = lookup(most, least);
        if (t.status.equals(next)) {
            return Result.ok(next, new ArrayList<>()); // TC-7
        }
        Record r = record("UPDATE", least, now);
        r.expected = expected;
        r.next = next;
        long rid = nextRecordId;
        List<Object> undone = new ArrayList<>(List.of(append(rid, r), delete(List.of(rid))));
        if (!t.status.equals(expected)) { // TC-8
            throw new Refusal("InvalidTxnStatus", expectMessage(most, least, expected, t.status), undone);
        }
        if (!canTransition(t.status, next)) {
            throw new Refusal("InvalidTxnStatus",
                    "Transaction `" + spell(most, least) + "` can not be changed from " + t.status + " to " + next, undone);
        }
        nextRecordId++;
        if (next.equals("ABORTING") && timeout) {
            timedOut++;
        }
        t.recordIds.add(rid);
        List<Object> effects = new ArrayList<>(List.of(append(rid, r)));
        if (terminal(next)) { // TC-9
            txns.remove(least);
            if (next.equals("COMMITTED")) {
                committed++;
            } else {
                aborted++;
            }
            effects.add(delete(t.recordIds));
            return Result.ok(next, effects);
        }
        t.status = next;
        t.lastModified = now;
        return Result.ok(next, effects);
    }

    // --- ending a transaction (TC-13 .. TC-16) ---------------------------------------------------

    private Result retry(long least, String action, boolean timeout, Refusal failure) {
        List<Object> effects = new ArrayList<>(failure.effects);
        effects.add(resume(least, action, timeout, END_TXN_RETRY_INTERVAL_MS));
        return Result.error(failure.name, failure.getMessage(), effects);
    }

    Result endTransaction(long most, long least, Object action, boolean timeout, long now) throws Refusal {
        if (!"COMMIT".equals(action) && !"ABORT".equals(action)) {
            throw new Refusal("UnsupportedTxnAction", "Unsupported txnAction " + action);
        }
        String act = (String) action;
        String target = act.equals("COMMIT") ? "COMMITTING" : "ABORTING";
        Txn t = lookup(most, least);
        List<Object> effects = new ArrayList<>();
        if (t.status.equals("OPEN")) {
            Snapshot before = snapshot();
            try {
                effects.addAll(updateTxnStatus(most, least, target, "OPEN", timeout, now).effects);
            } catch (Refusal failure) {
                restore(before);
                if (RETRYABLE.contains(failure.name)) {
                    return retry(least, act, timeout, failure);
                }
                throw failure;
            }
        } else if (!t.status.equals(target)) {
            throw new Refusal("InvalidTxnStatus", expectMessage(most, least, target, t.status));
        }
        Txn live = txns.get(least);
        effects.add(Json.obj(
                "@type", "EndTxnInTransactionBuffer",
                "txn_id", txnId(most, least),
                "action", act,
                "is_timeout", timeout,
                "low_water_mark", lowWaterMark(),
                "partitions", new ArrayList<Object>(live.partitions),
                "subscriptions", new ArrayList<Object>(live.subscriptions)));
        return Result.ok(target, effects);
    }

    Result endTxn(long most, long least, Object action, long now, String caller) throws Refusal {
        Txn t = lookup(most, least);
        if (!mayAccess(t, caller)) {
            throw hidden(most, least, caller);
        }
        return endTransaction(most, least, action, false, now);
    }

    Result participantsAnswered(long most, long least, String action, boolean timeout, long now, List<?> errors)
            throws Refusal {
        String first = null;
        for (Object e : errors) {
            String name = (String) e;
            if (!RETRYABLE.contains(name)) {
                throw new Refusal(name, "participant failed: " + name); // TC-16: the first final one
            }
            if (first == null) {
                first = name;
            }
        }
        if (first != null) {
            return retry(least, action, timeout, new Refusal(first, "participant failed: " + first));
        }
        String ending = action.equals("COMMIT") ? "COMMITTING" : "ABORTING";
        String fin = action.equals("COMMIT") ? "COMMITTED" : "ABORTED";
        Snapshot before = snapshot();
        try {
            return updateTxnStatus(most, least, fin, ending, timeout, now);
        } catch (Refusal failure) {
            restore(before);
            if (RETRYABLE.contains(failure.name)) {
                return retry(least, action, timeout, failure);
            }
            throw failure;
        }
    }

    // --- timeouts (TC-18) --------------------------------------------------------------------------

    Result tick(long now) throws Refusal {
        List<Object> abortedIds = new ArrayList<>();
        List<Object> effects = new ArrayList<>();
        if (!storeState.equals("READY")) {
            return Result.ok(abortedIds, effects);
        }
        List<Txn> due = new ArrayList<>();
        for (Txn t : txns.values()) {
            if (t.status.equals("OPEN") && t.startTime + t.timeoutMs < now) {
                due.add(t);
            }
        }
        due.sort(Comparator.comparingLong((Txn t) -> t.startTime + t.timeoutMs).thenComparingLong(t -> t.seq));
        for (Txn t : due) {
            effects.addAll(endTransaction(coordinatorId, t.seq, "ABORT", true, now).effects);
            abortedIds.add(txnId(coordinatorId, t.seq));
        }
        return Result.ok(abortedIds, effects);
    }

    // --- queries (TC-11, TC-27) ----------------------------------------------------------------------

    Map<String, Object> meta(Txn t) {
        return Json.obj(
                "@type", "TxnMeta",
                "txn_id", txnId(coordinatorId, t.seq),
                "status", t.status,
                "produced_partitions", new ArrayList<Object>(t.partitions),
                "acked_subscriptions", new ArrayList<Object>(t.subscriptions),
                "timeout_ms", t.timeoutMs,
                "start_time", t.startTime,
                "last_modification_time", t.lastModified,
                "owner", t.owner,
                "record_ids", new ArrayList<Object>(t.recordIds));
    }

    Result getTxnMeta(long most, long least, boolean statusOnly) throws Refusal {
        Txn t = lookup(most, least);
        return Result.ok(statusOnly ? t.status : meta(t), new ArrayList<>());
    }

    Result slowTransactions(long timeoutMs) {
        List<Object> out = new ArrayList<>();
        for (Txn t : txns.values()) {
            if (t.timeoutMs > timeoutMs) {
                out.add(txnId(coordinatorId, t.seq));
            }
        }
        return Result.ok(out, new ArrayList<>());
    }

    // --- a step that fails leaves the store as it was -----------------------------------------------

    private static final class Snapshot {
        String storeState;
        long sequenceId, nextRecordId, created, committed, aborted, timedOut;
        TreeMap<Long, Txn> txns = new TreeMap<>();
    }

    Snapshot snapshot() {
        Snapshot s = new Snapshot();
        s.storeState = storeState;
        s.sequenceId = sequenceId;
        s.nextRecordId = nextRecordId;
        s.created = created;
        s.committed = committed;
        s.aborted = aborted;
        s.timedOut = timedOut;
        for (Map.Entry<Long, Txn> e : txns.entrySet()) {
            s.txns.put(e.getKey(), e.getValue().copy());
        }
        return s;
    }

    void restore(Snapshot s) {
        storeState = s.storeState;
        sequenceId = s.sequenceId;
        nextRecordId = s.nextRecordId;
        created = s.created;
        committed = s.committed;
        aborted = s.aborted;
        timedOut = s.timedOut;
        txns = s.txns;
    }

    // --- recovery (TC-21 .. TC-25) -------------------------------------------------------------------

    /** Rebuild the store from the durable log after a crash: None, init, replay, replay complete. */
    Result recover() throws Refusal {
        txns = new TreeMap<>();
        storeState = "NONE";
        sequenceId = -1;
        nextRecordId = 0;
        created = committed = aborted = timedOut = 0; // TC-20: in memory only
        initStore(lastMaxLocalTxnId);
        List<Object> effects = new ArrayList<>();
        for (Map.Entry<Long, String> e : new ArrayList<>(log.entrySet())) {
            effects.addAll(replay(e.getKey(), Record.read(e.getValue())).effects);
        }
        effects.addAll(replayComplete().effects);
        // TC-25: the record-id counter continues one above the highest live record (0 with none)
        long highest = -1;
        for (Txn t : txns.values()) {
            for (long id : t.recordIds) {
                highest = Math.max(highest, id);
            }
        }
        nextRecordId = highest + 1;
        Result result = Result.ok(null, effects);
        persist(result);
        return result;
    }
}
