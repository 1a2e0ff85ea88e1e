#!/usr/bin/env python3
"""Two memra-serve processes on one model, one per backend, asked the same requests at once:
the texts must be identical (the engine's CPU agreement and isolation contracts, seen from a
client). Standard library only, so it runs on the GPU machine, which has no PyPI.

    python3 tests/py/serve_compare.py MEMRA_SERVE MODEL.gguf PLAN_DIR [BACKEND_A BACKEND_B]

BACKEND_A / BACKEND_B default to cpu and cuda (scripts/device-gates.sh step 5); cpu cpu checks
the script itself. Each server gets four concurrent seeded requests and one greedy request;
prints one line, exits non-zero on a difference or an error.
"""
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request


def start(serve, model, plans, backend):
    p = subprocess.Popen([serve, "-m", model, "--plans", plans, "--backend", backend,
                          "--port", "0", "--slots", "4", "--ctx", "128", "--model-name", "m"],
                         stderr=subprocess.PIPE, text=True)
    log = []
    for line in p.stderr:
        log.append(line)
        m = re.search(r"listening on (http://[\d.]+:\d+)", line)
        if m:
            threading.Thread(target=lambda: log.extend(p.stderr), daemon=True).start()
            return p, m.group(1), log
    p.wait()
    sys.exit(f"memra-serve --backend {backend} did not start:\n" + "".join(log))


def ask(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["text"]


def run(url):
    bodies = [dict(prompt=[1, 2, 3 + i], max_tokens=24, temperature=0.8, top_p=0.9, seed=i)
              for i in range(4)]
    out = [None] * 4
    ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, ask(url, bodies[i])))
          for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    health = json.load(urllib.request.urlopen(url + "/health", timeout=30))
    out.append(ask(url, dict(prompt=[5, 4, 3, 2, 1], max_tokens=32, temperature=0)))
    return out, health["max_rows_per_tick"]


def main():
    serve, model, plans = sys.argv[1:4]
    backends = sys.argv[4:6] if len(sys.argv) >= 6 else ["cpu", "cuda"]
    results = []
    for b in backends:
        p, url, log = start(serve, model, plans, b)
        try:
            results.append(run(url))
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
    (a, ra), (b, rb) = results
    if a != b:
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                print(f"request {i}: {backends[0]} {x!r} != {backends[1]} {y!r}")
        sys.exit(1)
    print(f"{backends[1]} = {backends[0]}: 4 concurrent seeded + 1 greedy request, same text "
          f"(up to {ra} / {rb} rows per tick)")


if __name__ == "__main__":
    main()
