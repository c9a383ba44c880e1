"""The protocol around client_txn.ClientTxn: txnmodel conform --machine client --impl "python3 client_adapter.py"."""

import json
import sys

from client_txn import ClientTxn, Refused

txn = None


def answer(request):
    global txn
    op = request["op"]
    if op == "hello":
        return {"ok": {"protocol": 1, "machine": "client", "implementation": "client_txn.py", "crash": False}}
    if op == "init":
        txn = ClientTxn(request["init"].get("txn_id", [0, 0]), request["init"].get("timeout_ms", 30000))
    elif op == "observe":
        return {"ok": getattr(txn, request["observer"])(**request["args"])}
    elif op == "step":
        try:  # a command is the method of the same name, its arguments the method's
            value, effects = getattr(txn, request["command"])(**request["args"])
        except Refused as refused:
            return {"error": refused.name, "message": str(refused)}
        return {"ok": value, "effects": effects}
    return {"ok": None}  # init and close


for line in sys.stdin:
    try:
        print(json.dumps(answer(json.loads(line))), flush=True)
    except Exception as exc:  # the protocol's answer for an adapter that throws
        print(json.dumps({"fail": f"{type(exc).__name__}: {exc}"}), flush=True)
