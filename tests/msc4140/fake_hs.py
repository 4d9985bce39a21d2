#!/usr/bin/env python3
"""A small Matrix homeserver for the gateway's tests.

It implements what the tests rely on, the way Synapse does: whoami (access
tokens, guests), versions, capabilities, sending message events with
transaction ids (deduplicated per sender and transaction), state events
with power levels it can be told to enforce, room messages, and appservice
masquerading (?user_id= with the appservice token, ts honoured only for the
appservice). For the streaming tests, a media upload is checked against a
known byte pattern as it is read (never held whole), and /sync?big=N answers
N bytes of that pattern, written as they are made. Every request is recorded; /_test/ endpoints let a test read
the record, add users and rooms, and make the next sends fail. /_test/as_token
refuses the appservice token ({"reject": true}: 401 M_UNKNOWN_TOKEN), takes
another ({"token": T}) or
limits the users it acts as ({"namespace": REGEX}: 403 M_FORBIDDEN, as
Synapse); /_test/down {"seconds": N} closes every other request's connection
unanswered for N seconds. The room directory's visibility endpoint answers
404 M_NOT_FOUND for a room the server does not know.

usage: fake_hs.py --ready FILE [--as-token TOKEN]
"""

import argparse
import base64
import json
import os
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {
    "users": {  # token -> (user_id, device_id, is_guest)
        "tok_alice": ("@alice:test", "ALICEDEV", False),
        "tok_alice2": ("@alice:test", "ALICEDEV2", False),
        "tok_bob": ("@bob:test", "BOBDEV", False),
        "tok_guest": ("@guest1:test", "GUESTDEV", True),
    },
    "rooms": {},  # room_id -> {members, power, enforce, events, state}
    "requests": [],
    "fail": [],  # statuses for the next sends
    "uploads": [],  # media uploads: seed, length, whether intact
    "hang": 0,  # seconds the next send waits before it is handled
    "txns": {},  # (sender, scope, txn) -> event_id
    "seq": 0,
    # the appservice token refused (401 M_UNKNOWN_TOKEN, as Synapse answers
    # a token it does not know), and the users it may act as (a regex)
    "as_reject": False,
    "as_namespace": None,
    "down_until": 0.0,  # requests get no answer (the connection closes)
}
AS_TOKEN = "as_secret"

# The byte pattern of large bodies: block k (64 KiB) of the stream of seed s
# is PAT[o:o + BLOCK] with o = (s * 131 + k * 7) % 256, so byte p of the
# stream is (o + p % BLOCK) % 256 (tests/msc4140/test_stream.c makes the
# same). A lost, repeated or moved block changes the bytes.
BLOCK = 65536
PAT = bytes(range(256)) * (BLOCK // 256 + 1)


def pattern(seed, k):
    o = (seed * 131 + k * 7) % 256
    return PAT[o:o + BLOCK]


def new_room(room_id, members=None, power=None, enforce=False):
    return {
        "members": set(members or ["@alice:test", "@bob:test", "@guest1:test"]),
        "power": power or {"users": {}, "users_default": 0,
                           "state_default": 50, "events_default": 0,
                           "events": {}},
        "enforce": enforce,
        "events": [],
        "state": {},
    }


STATE["rooms"]["!room:test"] = new_room("!room:test")
STATE["rooms"]["!other:test"] = new_room("!other:test")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj, raw=None):
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Fake-HS", "yes")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def err(self, status, code, msg):
        self.reply(status, {"errcode": code, "error": msg})

    def pieces(self):
        """The request body in pieces, by Content-Length or chunked."""
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if te == "chunked":
            while True:
                line = self.rfile.readline()
                if not line.strip():
                    return  # cut short
                n = int(line.split(b";")[0].strip(), 16)
                if n == 0:
                    while self.rfile.readline().strip():
                        pass  # trailers
                    return
                while n > 0:
                    p = self.rfile.read(min(n, BLOCK))
                    if not p:
                        return
                    n -= len(p)
                    yield p
                self.rfile.readline()  # the CRLF after the data
        n = int(self.headers.get("Content-Length") or 0)
        while n > 0:
            p = self.rfile.read(min(n, BLOCK))
            if not p:
                return
            n -= len(p)
            yield p

    def body(self):
        return b"".join(self.pieces())

    def token(self, query):
        h = self.headers.get("Authorization") or ""
        if h.startswith("Bearer "):
            return h[7:]
        return (query.get("access_token") or [None])[0]

    def caller(self, query):
        """(user_id, device, is_as) or None after replying 401."""
        tok = self.token(query)
        if tok is None:
            self.err(401, "M_MISSING_TOKEN", "Missing access token")
            return None
        if tok == AS_TOKEN and not STATE["as_reject"]:
            uid = (query.get("user_id") or ["@msc4140-gateway:test"])[0]
            ns = STATE["as_namespace"]
            if ns is not None and "user_id" in query and \
                    not re.fullmatch(ns, uid):
                self.err(403, "M_FORBIDDEN",
                         "Application service cannot masquerade as this "
                         "user (%s)." % uid)
                return None
            return (uid, None, True)
        u = STATE["users"].get(tok)
        if u is None:
            self.err(401, "M_UNKNOWN_TOKEN", "Unrecognised access token")
            return None
        return (u[0], u[1], False)

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        raw_path = url.path
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if time.time() < STATE["down_until"] and \
                not raw_path.startswith("/_test/"):
            self.close_connection = True  # no answer at all
            return
        if raw_path == "/_matrix/media/v3/upload" and self.command == "POST":
            return self.upload(query)
        body = self.body()
        if not raw_path.startswith("/_test/"):
            with LOCK:
                STATE["requests"].append({
                    "method": self.command,
                    "path": raw_path,
                    "query": url.query,
                    "auth": self.headers.get("Authorization") or "",
                    "body_b64": base64.b64encode(body).decode(),
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "at": int(time.time() * 1000),
                })
        segs = [urllib.parse.unquote(s) for s in raw_path.split("/")[1:]]
        try:
            self.route(segs, query, body)
        except BrokenPipeError:
            pass

    def upload(self, query):
        """Check the body against the pattern as it comes; keep nothing."""
        seed = int((query.get("seed") or ["0"])[0])
        held, k, n, intact = b"", 0, 0, True
        for p in self.pieces():
            n += len(p)
            held += p
            while len(held) >= BLOCK:
                intact = intact and held[:BLOCK] == pattern(seed, k)
                held, k = held[BLOCK:], k + 1
        intact = intact and held == pattern(seed, k)[:len(held)]
        with LOCK:
            STATE["uploads"].append({"seed": seed, "len": n,
                                     "intact": intact})
        self.reply(200, {"content_uri": "mxc://test/%d" % seed, "len": n,
                         "intact": intact})

    def big(self, n, seed, cut):
        """n bytes of the pattern, written as they are made; with cut, the
        connection is closed after that many."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        k = 0
        if cut is not None:
            n = cut
            self.close_connection = True
        while n > 0:
            p = pattern(seed, k)[:n]
            self.wfile.write(p)
            n -= len(p)
            k += 1

    def route(self, segs, query, body):
        m = self.command
        if segs[:1] == ["_test"]:
            return self.test_api(segs[1:], body)
        if segs == ["_matrix", "client", "versions"] and m == "GET":
            return self.reply(200, {"versions": ["v1.1", "v1.11"],
                                    "unstable_features": {"x.other": True}})
        if len(segs) < 4 or segs[:2] != ["_matrix", "client"]:
            return self.err(404, "M_UNRECOGNIZED", "Unrecognized request")
        rest = segs[3:]
        if rest == ["sync"] and m == "GET" and "big" in query:
            cut = query.get("cut")
            return self.big(int(query["big"][0]),
                            int((query.get("seed") or ["0"])[0]),
                            int(cut[0]) if cut else None)
        if rest == ["capabilities"] and m == "GET":
            if self.caller(query) is None:
                return
            return self.reply(200, {"capabilities": {
                "m.change_password": {"enabled": True}}})
        if rest == ["account", "whoami"] and m == "GET":
            c = self.caller(query)
            if c is None:
                return
            tok = self.token(query)
            u = STATE["users"].get(tok)
            return self.reply(200, {"user_id": c[0], "device_id": c[1],
                                    "is_guest": bool(u and u[2])})
        if rest[:3] == ["directory", "list", "room"] and len(rest) == 4 \
                and m == "GET":
            # no authentication; any room the server knows, member or not
            with LOCK:
                known = rest[3] in STATE["rooms"]
            if not known:
                return self.err(404, "M_NOT_FOUND", "Unknown room")
            return self.reply(200, {"visibility": "private"})
        if len(rest) >= 3 and rest[0] == "rooms":
            return self.room_api(rest[1], rest[2:], query, body)
        if rest[:1] == ["echo"]:
            return self.reply(200, {"method": m, "query": self.path,
                                    "len": len(body),
                                    "body_b64": base64.b64encode(body).decode()})
        return self.err(404, "M_UNRECOGNIZED", "Unrecognized request")

    def room_api(self, room_id, rest, query, body):
        c = self.caller(query)
        if c is None:
            return
        sender, device, is_as = c
        with LOCK:
            hang, STATE["hang"] = STATE["hang"], 0
        if hang and self.command == "PUT":
            time.sleep(hang)
        with LOCK:
            room = STATE["rooms"].get(room_id)
            if room is None or sender not in room["members"]:
                return self.err(403, "M_FORBIDDEN",
                                "User %s not in room %s" % (sender, room_id))
            if rest[0] == "messages" and self.command == "GET":
                chunk = list(reversed(room["events"]))
                if (query.get("dir") or ["b"])[0] == "f":
                    chunk = list(room["events"])
                return self.reply(200, {"chunk": chunk, "start": "s0"})
            if self.command != "PUT" or rest[0] not in ("send", "state"):
                return self.err(404, "M_UNRECOGNIZED", "Unrecognized request")
            if STATE["fail"]:
                st = STATE["fail"].pop(0)
                return self.err(st, "M_UNKNOWN", "told to fail with %d" % st)
            try:
                content = json.loads(body.decode("utf-8"))
            except Exception:
                return self.err(400, "M_NOT_JSON", "Content not JSON.")
            if not isinstance(content, dict):
                return self.err(400, "M_BAD_JSON", "Content must be an object")
            ts = int(time.time() * 1000)
            if is_as and "ts" in query:
                ts = int(query["ts"][0])
            if rest[0] == "send":
                if len(rest) != 3:
                    return self.err(404, "M_UNRECOGNIZED", "bad path")
                etype, txn = rest[1], rest[2]
                key = (sender, "as" if is_as else device, txn)
                if key in STATE["txns"]:
                    return self.reply(200, {"event_id": STATE["txns"][key]})
                need = room["power"]["events"].get(
                    etype, room["power"]["events_default"])
                skey = None
            else:
                etype = rest[1]
                skey = rest[2] if len(rest) > 2 else ""
                need = room["power"]["events"].get(
                    etype, room["power"]["state_default"])
            have = room["power"]["users"].get(
                sender, room["power"]["users_default"])
            if room["enforce"] and have < need:
                return self.err(403, "M_FORBIDDEN",
                                "You don't have permission to post that "
                                "to the room. user_level (%d) < "
                                "send_level (%d)" % (have, need))
            STATE["seq"] += 1
            eid = "$ev%d" % STATE["seq"]
            ev = {"event_id": eid, "room_id": room_id, "sender": sender,
                  "type": etype, "content": content,
                  "origin_server_ts": ts}
            if skey is not None:
                ev["state_key"] = skey
                room["state"][(etype, skey)] = ev
            else:
                STATE["txns"][(sender, "as" if is_as else device,
                               rest[2])] = eid
            room["events"].append(ev)
            return self.reply(200, {"event_id": eid})

    def test_api(self, rest, body):
        with LOCK:
            if rest == ["requests"]:
                return self.reply(200, {"requests": STATE["requests"]})
            if rest == ["uploads"]:
                return self.reply(200, {"uploads": STATE["uploads"]})
            if rest == ["hang"]:
                STATE["hang"] = json.loads(body)["seconds"]
                return self.reply(200, {})
            if rest == ["as_token"]:
                global AS_TOKEN
                r = json.loads(body)
                STATE["as_reject"] = bool(r.get("reject", False))
                STATE["as_namespace"] = r.get("namespace")
                AS_TOKEN = r.get("token", AS_TOKEN)
                return self.reply(200, {})
            if rest == ["down"]:
                STATE["down_until"] = time.time() + \
                    json.loads(body)["seconds"]
                return self.reply(200, {})
            if rest == ["fail"]:
                STATE["fail"].extend(json.loads(body)["statuses"])
                return self.reply(200, {})
            if rest == ["room"]:
                r = json.loads(body)
                STATE["rooms"][r["room_id"]] = new_room(
                    r["room_id"], r.get("members"), r.get("power"),
                    r.get("enforce", False))
                return self.reply(200, {})
            if rest == ["user"]:
                u = json.loads(body)
                STATE["users"][u["token"]] = (u["user_id"],
                                              u.get("device_id", "DEV"),
                                              False)
                for room in STATE["rooms"].values():
                    room["members"].add(u["user_id"])
                return self.reply(200, {})
            if rest == ["events"]:
                out = []
                for room in STATE["rooms"].values():
                    out.extend(room["events"])
                out.sort(key=lambda e: int(e["event_id"][3:]))
                return self.reply(200, {"events": out})
        return self.err(404, "M_UNRECOGNIZED", "no such test endpoint")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_OPTIONS = handle_any


def main():
    global AS_TOKEN
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready", required=True)
    ap.add_argument("--as-token", default=AS_TOKEN)
    a = ap.parse_args()
    AS_TOKEN = a.as_token
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = a.ready + ".tmp"
    with open(tmp, "w") as f:
        f.write("http://127.0.0.1:%d\n" % srv.server_address[1])
    os.rename(tmp, a.ready)
    srv.serve_forever()


if __name__ == "__main__":
    main()
