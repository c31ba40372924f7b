#!/usr/bin/env python3
"""A parent agent in plain Python (standard library only): fan out three agents,
follow their events, wait for all of them, and print what each left behind.

    GROVE_BIN=grove python3 examples/parent.py [REPO]
"""
import json
import os
import socket
import subprocess
import sys

GROVE = os.environ.get("GROVE_BIN", "grove")


class Connection:
    """One JSON-RPC connection: a line out, lines back (notifications are queued)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rw", encoding="utf-8")
        self.next_id = 1
        self.pending = []
        self.call("hello", {"protocol": 1, "client": "examples/parent.py"})

    def call(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.file.write(json.dumps(request) + "\n")
        self.file.flush()
        while True:
            message = json.loads(self.file.readline())
            if "id" not in message:
                self.pending.append(message)
                continue
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']['message']}")
            return message["result"]

    def next_event(self):
        if self.pending:
            return self.pending.pop(0)
        line = self.file.readline()
        if not line:
            raise RuntimeError("the daemon closed the connection")
        return json.loads(line)


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    # Any grove command starts the daemon if it is not running; then ask where it listens.
    subprocess.run([GROVE, "list"], check=True, capture_output=True)
    status = json.loads(subprocess.run([GROVE, "--json", "daemon", "status"], check=True,
                                       capture_output=True, text=True).stdout)
    events = Connection(status["socket"])
    events.call("events.subscribe", {})
    control = Connection(status["socket"])

    tasks = {
        "docs": "echo '# Notes' > NOTES.md",
        "tests": "mkdir -p tests && echo 'assert True' > tests/test_smoke.py",
        "cleanup": "echo cleaned > CLEANUP.txt",
    }
    ids = []
    for name, script in tasks.items():
        record = control.call("agent.spawn", {"argv": ["sh", "-c", script], "repo": repo, "name": name})
        ids.append(record["id"])
        print(f"spawned {record['id']} ({name}) on {record['branch']}")

    done = set()
    while done != set(ids):
        event = events.next_event()
        params = event.get("params", {})
        if event["method"].startswith("agent.") and params.get("id") in ids:
            print(f"event {event['method']:<16} {params['id']} {params.get('status')}")
            if event["method"] == "agent.collected":
                done.add(params["id"])

    for agent in control.call("agent.wait", {"ids": ids})["agents"]:
        print(f"{agent['id']} {agent['outcome']}: branch {agent['branch']} "
              f"{agent['files_changed']} files +{agent['insertions']} -{agent['deletions']}")


if __name__ == "__main__":
    main()
