#!/usr/bin/env python3
"""memra-serve against the official `openai` client (an independent implementation of the
protocol): start the server on a free port, then models, completions and chat completions,
streamed and not, seeded sampling, and the errors the client must map to its exception types.

    python3 tests/py/check_serve_openai.py MEMRA_SERVE MODEL.gguf

MODEL should carry a Qwen3.5 chat template (memra-forge --vocab qwen35). Prints one line per
check; exits non-zero on the first failure. Test tooling only: memra never runs Python.
"""
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import openai


def main() -> int:
    serve, model = sys.argv[1], sys.argv[2]
    proc = subprocess.Popen(
        [serve, "-m", model, "--backend", "cpu", "--port", "0", "--slots", "4",
         "--ctx", "256", "--tiers", "1,2,4", "--model-name", "tiny"],
        stderr=subprocess.PIPE, text=True)
    port = None
    log = []
    for line in proc.stderr:  # the engine line, then the address
        log.append(line)
        m = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        proc.wait()
        sys.exit("memra-serve did not start:\n" + "".join(log))
    drain = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
    drain.start()
    try:
        check(openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                            max_retries=0, timeout=600))
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    if rc != 0:
        sys.exit(f"memra-serve exited with {rc}:\n" + "".join(log))
    print("memra-serve: SIGTERM, exit 0")
    return 0


def check(c: openai.OpenAI) -> None:
    ids = [m.id for m in c.models.list().data]
    assert ids == ["tiny"], ids
    print("models:", ids)

    r = c.completions.create(model="tiny", prompt="The sky is", max_tokens=8, temperature=0)
    text = r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length"), r
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0, r.usage
    chunks = list(c.completions.create(model="tiny", prompt="The sky is", max_tokens=8,
                                       temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == text, chunks
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason
    print(f"completion: {r.usage.completion_tokens} tokens, streamed = not streamed")

    msgs = [{"role": "user", "content": "Hi!"}]
    r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    msg = r.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str), msg
    assert r.object == "chat.completion", r
    chunks = list(c.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=4, temperature=0, stream=True,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == msg.content, chunks
    print(f"chat: {r.usage.prompt_tokens} prompt tokens (the Qwen3.5 template), "
          f"{r.usage.completion_tokens} generated, streamed = not streamed")

    # a stop string whose completing token also starts a multi-byte character: the text ends
    # exactly before the stop string (no U+FFFD from the held partial character after it)
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=10, temperature=1.0, seed=3)
    full = c.completions.create(**kw).choices[0].text
    stop = "rer\u54c1\u4f4d "
    assert stop in full, (full, "the forged model or its sampling changed: pick a new case")
    r = c.completions.create(stop=[stop], **kw)
    assert r.choices[0].text == full[:full.index(stop)], (r.choices[0].text, full)
    assert r.choices[0].finish_reason == "stop", r
    chunks = list(c.completions.create(stop=[stop], stream=True, **kw))
    assert "".join(ch.choices[0].text for ch in chunks) == r.choices[0].text, chunks
    print("stop string: cut exactly, streamed and not")

    # seeded sampling: the same text alone and among concurrent requests
    def ask(seed: int) -> str:
        return c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4,
                                    temperature=0.9, top_p=0.95, seed=seed).choices[0].text
    alone = [ask(s) for s in range(4)]
    together = [None] * 4
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, ask(i)))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone, (together, alone)
    health = json.load(urllib.request.urlopen(str(c.base_url).replace("/v1/", "/health")))
    assert health["max_rows_per_tick"] >= 2, health
    print(f"seeded sampling: 4 concurrent requests = each alone "
          f"(up to {health['max_rows_per_tick']} rows in one tick)")

    for kwargs, exc in ((dict(model="gpt-4"), openai.NotFoundError),
                        (dict(model="tiny", n=2), openai.BadRequestError),
                        (dict(model="tiny", max_tokens=0), openai.BadRequestError)):
        try:
            c.completions.create(prompt="x", **{"max_tokens": 2, **kwargs})
        except exc as e:
            assert e.body and "message" in e.body, e.body
        else:
            raise AssertionError(f"{kwargs}: no {exc.__name__}")
    print("errors: 404 model, 400 n=2, 400 max_tokens=0 as the client's exceptions")


if __name__ == "__main__":
    sys.exit(main())
