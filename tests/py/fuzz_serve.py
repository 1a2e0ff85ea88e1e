#!/usr/bin/env python3
"""Random requests against a running memra-serve: every field of both generation routes set
to random JSON of every type (huge and negative numbers, long and non-ASCII strings, token
lists, malformed message lists, truncated bodies). A pass: every answer is 200, 400 or 404
(never a crash, a hang or a 5xx), and /health shows nothing left active. Not in CI (it is a
load tool); run it against the ASan build, e.g.

    build-asan/memra-serve -m tiny.gguf --backend cpu --port 18097 --slots 4 --ctx 128 \\
        --tiers 1,2,4 &
    python3 tests/py/fuzz_serve.py 18097 1500 1      # PORT REQUESTS SEED
"""
import json
import random
import sys
import urllib.error
import urllib.request

KEYS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
        "top_k", "seed", "stop", "stream", "n", "best_of", "echo", "logprobs", "suffix", "tools",
        "logit_bias", "response_format", "model", "chat_template_kwargs", "frequency_penalty",
        "tool_choice"]


def value(rnd):
    roles = ["user", "system", "assistant", "tool", "x", None]
    contents = ["hi", None, 3, [{"type": "text", "text": "a"}], [{"type": "image"}]]
    return rnd.choice([
        None, True, False, rnd.randrange(-2**63, 2**63), rnd.random() * rnd.choice([1, -1, 1e308]),
        "", "x" * rnd.randrange(0, 3000), "\u00e9\u4e2d\U0001F600" * rnd.randrange(1, 50), [],
        [rnd.randrange(-5, 2000) for _ in range(rnd.randrange(0, 80))],
        {"type": "text", "text": "hi"},
        [{"role": rnd.choice(roles), "content": rnd.choice(contents)}
         for _ in range(rnd.randrange(0, 4))]])


def main():
    port, n, rnd = int(sys.argv[1]), int(sys.argv[2]), random.Random(int(sys.argv[3]))
    stat = {}
    for _ in range(n):
        body = {k: value(rnd) for k in rnd.sample(KEYS, rnd.randrange(0, 8))}
        if rnd.random() < 0.5:
            body["prompt"] = rnd.choice(["hello", [1, 2, 3], "a" * 50])
        if not isinstance(body.get("max_tokens"), int) or rnd.random() < 0.7:
            body["max_tokens"] = rnd.randrange(1, 6)  # keep the run short
        raw = json.dumps(body).encode()
        if rnd.random() < 0.1:
            raw = raw[:rnd.randrange(len(raw) + 1)]
        path = rnd.choice(["/v1/completions", "/v1/chat/completions"])
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=raw)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                code = r.status
                r.read()
        except urllib.error.HTTPError as e:
            code = e.code
            e.read()
        stat[code] = stat.get(code, 0) + 1
    health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/health"))
    print("statuses:", dict(sorted(stat.items())), "health:", health)
    bad = {c for c in stat if c not in (200, 400, 404)}
    if bad or health["active"] or health["queued"]:
        sys.exit(f"unexpected: statuses {sorted(bad)}, health {health}")


if __name__ == "__main__":
    main()
