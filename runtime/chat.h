/*
 * chat.h — chat formatting for the Qwen ChatML templates carried in tokenizer.chat_template.
 *
 * memra does not run Jinja. It recognizes the template a GGUF carries by the markers that
 * carry its behaviour (listed in chat.c, documented in docs/readme-tokenizer.md) and renders
 * messages with a C transcription of that template, byte-identical to what the Jinja
 * template renders for the supported inputs (tested against jinja2 output). Recognized:
 *   MEMRA_CHAT_QWEN35  Qwen3.5 (thinking kept only after the last user query)
 *   MEMRA_CHAT_QWEN36  Qwen3.6 (the same plus the preserve_thinking switch)
 * Anything else is refused (MEMRA_ERR_UNSUPPORTED, naming the first missing marker); a
 * plain completion (the prompt encoded as-is) needs no template and always works.
 *
 * Supported inputs: roles system (first only), user, assistant (with optional
 * reasoning_content, or "<think>...</think>" inside content), tool (tool responses); text
 * content. Not supported (refused with MEMRA_ERR_UNSUPPORTED by the caller's choice not to
 * pass them): tool definitions, assistant tool_calls, image/video content parts.
 */
#ifndef MEMRA_CHAT_H
#define MEMRA_CHAT_H

#include <stddef.h>

#include "err.h"

typedef enum memra_chat_kind {
    MEMRA_CHAT_NONE = 0,
    MEMRA_CHAT_QWEN35 = 1,
    MEMRA_CHAT_QWEN36 = 2,
} memra_chat_kind;

typedef struct memra_chat_msg {
    const char *role;              /* "system" | "user" | "assistant" | "tool" */
    const char *content;           /* NUL-terminated UTF-8; NULL renders as "" */
    const char *reasoning_content; /* assistant only; NULL = not given */
} memra_chat_msg;

typedef struct memra_chat_opts {
    int add_generation_prompt; /* append "<|im_start|>assistant\n" + the think prefill */
    int enable_thinking;       /* -1 undefined (the template's default: think), 0, 1 */
    int preserve_thinking;     /* QWEN36 only: keep every assistant turn's thinking */
} memra_chat_opts;

/* add_generation_prompt = 1, enable_thinking = -1, preserve_thinking = 0. */
void memra_chat_opts_init(memra_chat_opts *o);

/* Recognize a template. tmpl NULL or empty → MEMRA_ERR_NOT_FOUND; unrecognized →
 * MEMRA_ERR_UNSUPPORTED with the missing marker in err. */
int memra_chat_detect(const char *tmpl, size_t len, memra_chat_kind *kind, memra_err *err);
const char *memra_chat_kind_name(memra_chat_kind kind);

/* Render msgs[0..n) into *out (malloc'ed, NUL-terminated; caller frees). The template's own
 * raise_exception() cases are MEMRA_ERR_INVALID_ARG with the template's message. */
int memra_chat_format(memra_chat_kind kind, const memra_chat_msg *msgs, size_t n,
                      const memra_chat_opts *o, char **out, size_t *out_len, memra_err *err);

#endif
