import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The conformance protocol (docs/spec/conform.md) around {@link TxnCoordinator}: one JSON
 * request per line on standard input, one JSON answer per line on standard output.
 *
 *   javac -d out/java examples/java/coordinator/*.java
 *   txnmodel conform --machine coordinator --impl "java -cp out/java ConformAdapter"
 */
public final class ConformAdapter {
    private static final List<String> COMMANDS = List.of(
            "init_store", "handle_metadata_entry", "replay_complete", "close_store", "transaction_log_closed",
            "new_txn", "add_partition_to_txn", "add_subscription_to_txn", "update_txn_status", "end_txn",
            "resume_end_txn", "end_txn_in_transaction_buffer_result", "tick", "get_txn_meta", "get_txn_status",
            "get_slow_transactions");
    private static final List<String> OBSERVERS = List.of(
            "txn_status", "produced_partitions", "acked_subscriptions", "record_ids", "low_water_mark",
            "store_state", "sequence_id", "ongoing_count", "live_txns", "live_record_ids", "stats");

    private TxnCoordinator store = new TxnCoordinator();
    private boolean crashed = false;

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        ConformAdapter adapter = new ConformAdapter();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> answer;
            String op = "";
            try {
                @SuppressWarnings("unchecked")
                Map<String, Object> request = (Map<String, Object>) Json.parse(line);
                op = String.valueOf(request.get("op"));
                answer = adapter.handle(op, request);
            } catch (RuntimeException e) {
                answer = Json.obj("fail", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            out.println(Json.write(answer));
            out.flush();
            if (op.equals("close")) {
                return;
            }
        }
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> handle(String op, Map<String, Object> request) {
        Map<String, Object> args = (Map<String, Object>) request.getOrDefault("args", Map.of());
        switch (op) {
            case "hello":
                return Json.obj("ok", Json.obj(
                        "protocol", 1L,
                        "machine", "coordinator",
                        "implementation", "Java example adapter (examples/java/coordinator)",
                        "commands", new ArrayList<Object>(COMMANDS),
                        "observers", new ArrayList<Object>(OBSERVERS)));
            case "init":
                init((Map<String, Object>) request.get("config"), (Map<String, Object>) request.get("init"));
                return Json.obj("ok", null);
            case "step":
                return answer(step((String) request.get("command"), args));
            case "observe":
                return Json.obj("ok", observe((String) request.get("observer"), args));
            case "crash":
                crash();
                return Json.obj("ok", null);
            case "recover":
                return answer(recover());
            case "close":
                return Json.obj("ok", null);
            default:
                return Json.obj("fail", "unknown op " + op);
        }
    }

    private static Map<String, Object> answer(TxnCoordinator.Result result) {
        if (result.ok) {
            return Json.obj("ok", result.value, "effects", result.effects);
        }
        return Json.obj("error", result.value, "message", result.message, "effects", result.effects);
    }

    // --- init: broker.conf keys and the machine's initial values -----------------------------------

    private void init(Map<String, Object> config, Map<String, Object> init) {
        store = new TxnCoordinator();
        crashed = false;
        for (Map.Entry<String, Object> e : config.entrySet()) {
            switch (e.getKey()) {
                case "maxActiveTransactionsPerCoordinator":
                    store.maxActive = (Long) e.getValue();
                    break;
                case "authenticationEnabled":
                    store.authentication = (Boolean) e.getValue();
                    break;
                case "authorizationEnabled":
                    store.authorization = (Boolean) e.getValue();
                    break;
                case "superUserRoles":
                    for (Object role : (List<?>) e.getValue()) {
                        store.superUsers.add((String) role);
                    }
                    break;
                default:
                    break; // keys the coordinator does not read
            }
        }
        store.coordinatorId = (Long) init.getOrDefault("coordinator_id", 0L);
        store.storeState = (String) init.getOrDefault("store_state", "READY");
    }

    // --- steps ---------------------------------------------------------------------------------------

    private TxnCoordinator.Result step(String command, Map<String, Object> a) {
        if (crashed) {
            throw new IllegalStateException("the store has crashed; only recover may follow");
        }
        TxnCoordinator.Result result;
        try {
            result = dispatch(command, a);
        } catch (TxnCoordinator.Refusal refused) {
            result = TxnCoordinator.Result.error(refused.name, refused.getMessage(), refused.effects);
        }
        store.persist(result);
        return result;
    }

    @SuppressWarnings("unchecked")
    private TxnCoordinator.Result dispatch(String command, Map<String, Object> a) throws TxnCoordinator.Refusal {
        List<Object> txn = (List<Object>) a.get("txn_id");
        long most = txn == null ? 0 : (Long) txn.get(0);
        long least = txn == null ? 0 : (Long) txn.get(1);
        long now = (Long) a.getOrDefault("now_ms", 0L);
        boolean timeout = (Boolean) a.getOrDefault("is_timeout", false);
        switch (command) {
            case "init_store":
                return store.initStore((Long) a.getOrDefault("max_local_txn_id", -1L));
            case "handle_metadata_entry":
                return store.replay((Long) a.get("record_id"),
                        TxnCoordinator.Record.of((Map<String, Object>) a.get("record")));
            case "replay_complete":
                return store.replayComplete();
            case "close_store":
                return store.closeStore();
            case "transaction_log_closed":
                return store.logClosed();
            case "new_txn":
                return store.newTxn((Long) a.get("timeout_ms"), now, (String) a.get("owner"));
            case "add_partition_to_txn":
                return store.addToTxn(true, most, least, (List<?>) a.get("partitions"), now, (String) a.get("caller"));
            case "add_subscription_to_txn":
                return store.addToTxn(false, most, least, (List<?>) a.get("subscriptions"), now,
                        (String) a.get("caller"));
            case "update_txn_status":
                return store.updateTxnStatus(most, least, (String) a.get("new_status"),
                        (String) a.get("expected_status"), timeout, now);
            case "end_txn":
                return store.endTxn(most, least, action(a.get("action")), now, (String) a.get("caller"));
            case "resume_end_txn":
                return store.endTransaction(most, least, action(a.get("action")), timeout, now);
            case "end_txn_in_transaction_buffer_result":
                return store.participantsAnswered(most, least, (String) action(a.get("action")), timeout, now,
                        (List<?>) a.getOrDefault("errors", List.of()));
            case "tick":
                return store.tick(now);
            case "get_txn_meta":
                return store.getTxnMeta(most, least, false);
            case "get_txn_status":
                return store.getTxnMeta(most, least, true);
            case "get_slow_transactions":
                return store.slowTransactions((Long) a.get("timeout_ms"));
            default:
                throw new IllegalArgumentException("unknown command " + command);
        }
    }

    /** TxnAction by name, or its wire value (COMMIT = 0, ABORT = 1, anything else as given). */
    private static Object action(Object raw) {
        if (raw instanceof Long) {
            long v = (Long) raw;
            return v == 0 ? "COMMIT" : v == 1 ? "ABORT" : raw;
        }
        return raw;
    }

    // --- observers -----------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    private Object observe(String observer, Map<String, Object> a) {
        if (crashed) {
            throw new IllegalStateException("the store has crashed; only recover may follow");
        }
        TxnCoordinator.Txn t = null;
        if (a.containsKey("txn_id")) {
            List<Object> txn = (List<Object>) a.get("txn_id");
            if ((Long) txn.get(0) == store.coordinatorId) {
                t = store.txns.get((Long) txn.get(1));
            }
        }
        switch (observer) {
            case "txn_status":
                return t == null ? null : t.status;
            case "produced_partitions":
                return t == null ? null : new ArrayList<Object>(t.partitions);
            case "acked_subscriptions":
                return t == null ? null : new ArrayList<Object>(t.subscriptions);
            case "record_ids":
                return t == null ? null : new ArrayList<Object>(t.recordIds);
            case "low_water_mark":
                return store.lowWaterMark();
            case "store_state":
                return store.storeState;
            case "sequence_id":
                return store.sequenceId;
            case "ongoing_count":
                return (long) store.txns.size();
            case "live_txns": {
                List<Object> out = new ArrayList<>();
                for (long seq : store.txns.keySet()) {
                    out.add(TxnCoordinator.txnId(store.coordinatorId, seq));
                }
                return out;
            }
            case "live_record_ids": {
                List<Long> ids = new ArrayList<>();
                for (TxnCoordinator.Txn live : store.txns.values()) {
                    ids.addAll(live.recordIds);
                }
                ids.sort(null);
                return new ArrayList<Object>(ids);
            }
            case "stats":
                return Json.obj("@type", "CoordinatorStats", "created", store.created, "committed", store.committed,
                        "aborted", store.aborted, "timeout", store.timedOut);
            default:
                throw new IllegalArgumentException("unknown observer " + observer);
        }
    }

    // --- crash and recovery --------------------------------------------------------------------------

    /** Everything in memory is lost; the log and the interceptor's value are durable. */
    private void crash() {
        TxnCoordinator survivor = new TxnCoordinator();
        survivor.maxActive = store.maxActive;
        survivor.authentication = store.authentication;
        survivor.authorization = store.authorization;
        survivor.superUsers.addAll(store.superUsers);
        survivor.coordinatorId = store.coordinatorId;
        survivor.log.putAll(store.log);
        survivor.lastMaxLocalTxnId = store.lastMaxLocalTxnId;
        store = survivor;
        crashed = true;
    }

    private TxnCoordinator.Result recover() {
        crashed = false;
        try {
            return store.recover();
        } catch (TxnCoordinator.Refusal refused) {
            return TxnCoordinator.Result.error(refused.name, refused.getMessage(), refused.effects);
        }
    }
}
