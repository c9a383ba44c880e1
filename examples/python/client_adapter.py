"""The protocol around client_txn.ClientTxn: txnmodel conform --machine client --impl "python3 client_adapter.py"."""

import json
import sys

from client_txn import ClientTxn, Refused

txn = None
STEPS = {
    "send": lambda a: txn.send(a["topic"]),
    "ack": lambda a: txn.ack(a["subscription"]),
    "op_completed": lambda a: txn.op_completed(a.get("failed", False)),
    "commit": lambda a: txn.end("COMMIT"),
    "abort": lambda a: txn.end("ABORT"),
    "end_txn_response": lambda a: txn.end_txn_response(a.get("error")),
    "timeout_fired": lambda a: txn.timeout_fired(),
}
OBSERVERS = {
    "state": lambda: txn.state,
    "pending_ops": lambda: txn.pending,
    "produced_topics": lambda: sorted(txn.topics),
    "acked_subscriptions": lambda: [list(s) for s in sorted(txn.subscriptions)],
}


def answer(request):
    global txn
    if request["op"] == "hello":
        return {"ok": {"protocol": 1, "machine": "client", "implementation": "client_txn.py", "crash": False}}
    if request["op"] == "init":
        txn = ClientTxn(request["init"].get("txn_id", [0, 0]), request["init"].get("timeout_ms", 30000))
    if request["op"] == "observe":
        return {"ok": OBSERVERS[request["observer"]]()}
    if request["op"] == "step":
        try:
            value, effects = STEPS[request["command"]](request["args"])
            return {"ok": value, "effects": effects}
        except Refused as refused:
            return {"error": refused.name, "message": str(refused)}
    return {"ok": None}  # init and close


for line in sys.stdin:
    try:
        print(json.dumps(answer(json.loads(line))), flush=True)
    except Exception as exc:  # the protocol's answer for an adapter that throws
        print(json.dumps({"fail": f"{type(exc).__name__}: {exc}"}), flush=True)
