# tests/rpcoolctl_schema.py - checks one report of `rpcoolctl --json` (stdin) against the layout
# tools/rpcoolctl.md documents: every documented field, of its type, and no other.
# Exit 0, or 1 with what differs. Used by tests/test_rpcool_ops.c (tool_json_schema).
import json
import sys

TOP = {"schema": int, "time": int, "pod": str, "pod_readable": bool, "heaps": list,
       "channels": list, "exports": list, "missing": list, "pod_device": (str, type(None)),
       "pod_device_error": (str, type(None)), "pod_channels": list}
HEAP = {"key": str, "base": str, "end": str, "size": int, "used": int, "held": bool}
CHAN = {"name": str, "state": str, "server_pid": int, "owner_uid": int, "name_file": bool,
        "socket": bool}
CHAN_OPT = {"clean": str, "stats_error": str, "stats": dict, "conns": list}
STATS = {k: int for k in ("calls", "accepted", "closed", "reaped", "faults", "bad_entries",
                          "conns", "ready", "over_limit", "over_budget", "refused", "dropped",
                          "cancelled", "max_conns")}
CONN = {"transport": str, "slot": int, "pid": int, "uid": int, "gid": int,
        "authenticated": bool, "inflight": int, "pod": str, "addr": str}
PCHAN = {"name": str, "state": str, "host": str, "server_pid": int, "conns": int,
         "max_conns": int}
EXPORT = {"file": str, "heap_base": str, "record": str, "users": (bool, type(None)),
          "exporter": (bool, type(None))}


def fields(what, obj, need, opt=None):
    opt = opt or {}
    if not isinstance(obj, dict):
        sys.exit("%s: not an object: %r" % (what, obj))
    for k, t in need.items():
        if k not in obj:
            sys.exit("%s: no field %s: %r" % (what, k, obj))
    for k, v in obj.items():
        t = need.get(k, opt.get(k))
        if t is None:
            sys.exit("%s: undocumented field %s" % (what, k))
        if isinstance(v, bool) and t is int or not isinstance(v, t):
            sys.exit("%s: %s is %r" % (what, k, v))


lines = sys.stdin.read().splitlines()
if len(lines) != 1:
    sys.exit("one report, one line: %d lines" % len(lines))
d = json.loads(lines[0])
fields("report", d, TOP)
if d["schema"] != 1:
    sys.exit("schema %r" % d["schema"])
for h in d["heaps"]:
    fields("heap", h, HEAP)
    int(h["base"], 16), int(h["end"], 16)
for c in d["channels"]:
    fields("channel", c, CHAN, CHAN_OPT)
    if c["state"] not in ("live", "stale", "unknown"):
        sys.exit("channel state %r" % c["state"])
    if c["state"] == "live" and ("stats" in c) == ("stats_error" in c):
        sys.exit("a live channel has stats or stats_error: %r" % c)
    if c["state"] != "live" and ("stats" in c or "stats_error" in c):
        sys.exit("stats of a channel not live: %r" % c)
    if ("stats" in c) != ("conns" in c):
        sys.exit("stats and conns go together: %r" % c)
    if "stats" in c:
        fields("stats", c["stats"], STATS)
        for k in c["conns"]:
            fields("conn", k, CONN)
            if k["transport"] not in ("shm", "rdma"):
                sys.exit("transport %r" % k["transport"])
for x in d["exports"]:
    fields("export", x, EXPORT)
    int(x["heap_base"], 16), int(x["record"], 16)
for m in d["missing"]:
    if not isinstance(m, str):
        sys.exit("missing: %r" % m)
for c in d["pod_channels"]:
    fields("pod channel", c, PCHAN)
    if c["state"] not in ("live", "opening", "closed", "gone"):
        sys.exit("pod channel state %r" % c["state"])
if d["pod_device"] is None and (d["pod_channels"] or d["pod_device_error"] is not None):
    sys.exit("pod channels without a pod device: %r" % d)
