#!/usr/bin/env python3
"""Makes the tokenizer fixtures the CUnit tests compare kvcal against.

Run from the repository root (needs ../shared, python packages `tokenizers`
and `sentencepiece`; no network):

    python3 tests/make_tokenizer_fixtures.py

Writes tests/fixtures/tokenizer/:
  strings.jsonl            the test strings, generated deterministically:
                           {"text": str}, or {"hex": bytes} when not UTF-8
                           or holding a NUL byte
  bytelevel/tokenizer.json a byte-level BPE (Llama-3 pre-tokenizer regex)
                           trained here on ../shared corpora text
  bytelevel_ids.jsonl      its ids for every valid UTF-8 string (HF tokenizers)
  bytelevel_{gpt2,qwen2,digits}_ids.jsonl
                           ids of variants of it (bytelevel_variant(): GPT-2
                           ByteLevel regex; NFC + Qwen2 regex; Digits first,
                           on the strings holding a digit)
  spmbpe/tokenizer.json    a SentencePiece-style BPE tokenizer.json (Prepend +
                           Replace normalizer, byte fallback) trained here
  spmbpe/tokenizer_config.json
  spmbpe_meta/tokenizer.json the same model with a Metaspace pre-tokenizer
  spmbpe_ids.jsonl, spmbpe_meta_ids.jsonl
                           their ids (HF tokenizers; they differ where the
                           text starts with a space: Prepend always adds
                           U+2581, Metaspace "first" only when absent)
  llama2_spm_ids.jsonl     ids of ../shared/models/llama2-tokenizer/tokenizer.model
                           for every string (sentencepiece; bytes for invalid UTF-8)
  llama2c_ids.jsonl        ids of ../shared/models/stories260K/tok512.bin for
                           the first strings, from encode_llama2c() below: an
                           independent port of llama2.c run.c's encode()

Each *_ids.jsonl line is {"i": index into strings.jsonl, "ids": [...]}; ids
exclude BOS/EOS (the tests check those separately).
"""
import json
import os
import random
import struct
import sys

SHARED = os.environ.get("KVCAL_SHARED", "../shared")
OUT = "tests/fixtures/tokenizer"
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus(name):
    with open(os.path.join(SHARED, "corpora", name), encoding="utf-8") as f:
        return f.read()


# --- test strings -------------------------------------------------------------

CODE = [
    "def f(x):\n    return x**2 + 1\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "const x = arr.map((v) => v * 2).filter(Boolean);",
    "if err != nil {\n\t\treturn fmt.Errorf(\"open %s: %w\", path, err)\n\t}",
    "    \n        \n",
    "x=1;y=2;z=x+y",
    "<div class=\"row\"><span>&nbsp;</span></div>",
    "{\"key\": [1, 2.5, -3e10, null, true]}",
    "    @staticmethod\n    def __init__(self, *args, **kwargs):",
    "$ ls -la /usr/local/bin | grep -v '^d' && echo done",
    "fn main() { let v: Vec<u8> = vec![0xFF; 16]; }",
    "a <<= 2; b >>= 3; c ^= ~d; e ||= f && g;",
]
CJK = [
    "我们今天去公园散步。", "机器学习模型需要校准。", "東京は日本の首都です。",
    "これはテストの文章です。", "カタカナとひらがな", "한국어 문장도 있습니다.",
    "中文、日本語、한국어", "天気がいいので、散歩に行きましょう！", "数据集包含一千个样本",
    "今日は2026年11月29日です", "鳥が空を飛んでいる", "我爱北京天安门",
]
EMOJI = [
    "I love it 😀😀😀", "👍🏽 thumbs", "family: 👨‍👩‍👧‍👦", "flags 🇫🇷🇩🇪🇯🇵", "🔥🔥 hot 🔥",
    "math ∑∫√∞≠≤≥", "arrows ←↑→↓↔", "😀", "✅ done ❌ failed", "🧑‍💻 coding at 3am ☕",
]
MIXED = [
    "Привет, как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "Ça va très bien, merci.", "Grüße aus München, Straße",
    "¿Dónde está la biblioteca?", "naïve café résumé coöperate", "Ωmega and omega ω",
    "mixed English и русский 和中文", "tiếng Việt có dấu", "İstanbul'da ışık",
    "ﬁ ligature ﬀ and ＡＢＣ fullwidth", "zero\u200bwidth\u200cjoiners\u200d",
    "combining e\u0301 a\u0300 o\u0308", "Ⅻ roman numeral ½ ¾ ²³",
]
NFC = [
    "cafe\u0301 vs caf\u00e9", "A\u030a and \u212b and \u00c5", "\u1100\u1161\u11a8 \u1112\u1161\u11ab",
    "a\u0316\u0301 a\u0301\u0316", "\u0958\u0959 \u0915\u093c", "o\u0308\u0304 \u022b",
    "\u0344 \u0340\u0341", "e\u0323\u0302 \u1ec7", "\u1e9b\u0323", "\u0071\u0307\u0323",
    "\uac00\u11a8 \u1100\u1161", "\u00e9\u0301\u0301", "\u0301leading mark", "\u2126 ohm \u212a kelvin",
]
CONTRACTIONS = [
    "I'm sure it's fine, they're here and we've seen it.", "DON'T SHOUT, I'LL HEAR YOU'D",
    "She'S gone; we'Ve got 'em", "rock 'n' roll", "'s 't 're 've 'm 'll 'd",
    "o'clock y'all ma'am", "I've've", "''quoted''",
]
WHITESPACE_PARTS = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000", "\f", "\v"]
WORDS = ["hello", "world", "the", "KV", "cache", "fp8", "scale", "123", "x", "é", "日本", "!", "...", "'s"]


def gen_strings():
    rng = random.Random(20261129)
    texts = []
    # corpus windows: English prose and Shakespeare
    for name, count in (("tinystories_val.txt", 200), ("wikitext2_raw_test_hfjoin.txt", 200),
                        ("tinyshakespeare.txt", 120)):
        c = corpus(name)
        for _ in range(count):
            start = rng.randrange(0, len(c) - 400)
            texts.append(c[start:start + rng.randrange(1, 300)])
    texts += CODE + CJK + EMOJI + MIXED + CONTRACTIONS + NFC
    # numbers
    for _ in range(80):
        k = rng.randrange(6)
        if k == 0:
            s = str(rng.randrange(10 ** rng.randrange(1, 15)))
        elif k == 1:
            s = "%.*f" % (rng.randrange(1, 6), rng.uniform(-1e6, 1e6))
        elif k == 2:
            s = "{:,}".format(rng.randrange(10 ** 12))
        elif k == 3:
            s = "%d.%d.%d" % (rng.randrange(300), rng.randrange(300), rng.randrange(300))
        elif k == 4:
            s = "call 555-%04d at %02d:%02d, room %d" % (rng.randrange(10000), rng.randrange(24), rng.randrange(60), rng.randrange(999))
        else:
            s = "%de%d" % (rng.randrange(1000), rng.randrange(-20, 20))
        texts.append(s)
    # whitespace runs around words
    for _ in range(120):
        parts = []
        for _ in range(rng.randrange(1, 8)):
            parts.append(rng.choice(WHITESPACE_PARTS) if rng.random() < 0.5 else rng.choice(WORDS))
        texts.append("".join(parts))
    # random code points from assorted blocks
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0x1F300, 0x1F64F), (0x2000, 0x206F), (0xFF00, 0xFFEF), (0x10000, 0x1007F),
              (0x300, 0x36F), (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x1F00, 0x1FFF)]
    for _ in range(200):
        n = rng.randrange(1, 25)
        s = ""
        for _ in range(n):
            lo, hi = rng.choice(blocks)
            s += chr(rng.randrange(lo, hi + 1))
        texts.append(s)
    # single characters and edge cases
    texts += ["", " ", "  ", "\n", "a", "A", "0", "-", "\u2581", "\u2581hello", "<s>", "</s>", "<unk>",
              "<0x41>", "<|begin_of_text|>", "text <|end_of_text|> more", "\x00", "a\x00b",
              "\x7f\x01\x1b[0m"]
    items = [t.encode("utf-8") for t in texts]
    # invalid UTF-8 (sentencepiece and llama2.c accept bytes)
    for _ in range(40):
        good = rng.choice(texts).encode("utf-8")[:40]
        bad = bytes(rng.choice([0x80, 0xBF, 0xC0, 0xC1, 0xE4, 0xED, 0xF4, 0xF5, 0xFF]) for _ in range(rng.randrange(1, 4)))
        cut = rng.randrange(0, len(good) + 1)
        items.append(good[:cut] + bad + good[cut:])
    items += [b"\xe4\xb8", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\x80", b"ab\xe4\xb8\xadcd\xe4"]
    return items


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")


# --- llama2.c: an independent port of run.c's encode() -----------------------------

def load_llama2c(path):
    data = open(path, "rb").read()
    off = 4
    vocab, scores = [], []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        vocab.append(data[off:off + n])
        scores.append(score)
        off += n
    lookup = {}
    for i, v in enumerate(vocab):
        lookup.setdefault(v, i)
    return vocab, scores, lookup


def encode_llama2c(vocab, scores, lookup, text):
    tokens = []
    if text:
        tokens.append(lookup[b" "])
    buf = b""
    for i, c in enumerate(text):
        if (c & 0xC0) != 0x80:
            buf = b""
        buf += bytes([c])
        if i + 1 < len(text) and (text[i + 1] & 0xC0) == 0x80 and len(buf) < 4:
            continue
        if buf in lookup:
            tokens.append(lookup[buf])
        else:
            tokens.extend(b + 3 for b in buf)
        buf = b""
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for i in range(len(tokens) - 1):
            j = lookup.get(vocab[tokens[i]] + vocab[tokens[i + 1]], -1)
            if j != -1 and scores[j] > best_score:
                best_score, best_id, best_idx = scores[j], j, i
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


# --- trained tokenizer.json files ------------------------------------------------------

def training_text():
    out = []
    for name in ("wikitext2_raw_test_hfjoin.txt", "tinyshakespeare.txt", "tinystories_val.txt"):
        out += [l for l in corpus(name).split("\n") if l.strip()]
    return out


def train_bytelevel():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def bytelevel_variant(base, name):
    """tokenizer.json variants of the trained byte-level model (same vocab and
    merges), rebuilt the same way by tests/test_tokenizer.c:
    gpt2:  ByteLevel pre-tokenizer with its own GPT-2 regex (use_regex), no
           Split, ignore_merges false, ByteLevel post-processor (no BOS);
    qwen2: NFC normalizer, Split with the Qwen2 regex (single digits),
           ignore_merges false, ByteLevel post-processor;
    digits: Digits(individual_digits) before the GPT-2 ByteLevel regex."""
    t = json.loads(json.dumps(base))
    t["model"]["ignore_merges"] = False
    t["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True}
    if name in ("gpt2", "digits"):
        t["normalizer"] = None
        t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True}
        if name == "digits":
            t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True}, t["pre_tokenizer"]]}
    else:
        t["normalizer"] = {"type": "NFC"}
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return t


def train_spmbpe():
    """A Llama-2-style tokenizer.json: <unk> <s> </s>, 256 byte pieces, then
    BPE pieces trained on corpus text; Prepend + Replace normalizer, no
    pre-tokenizer, byte fallback, the Llama-2 decoder chain."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=1700, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False, limit_alphabet=400)
    tok.train_from_iterator(training_text(), trainer)
    trained = json.loads(tok.to_str())
    model = trained["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [m if isinstance(m, list) else m.split(" ") for m in model["merges"]]
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for c, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]
    legacy = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    meta = json.loads(json.dumps(legacy))
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                             "prepend_scheme": "first", "split": False}
    meta["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                       "prepend_scheme": "first", "split": False}
    return legacy, meta


def main():
    from tokenizers import Tokenizer
    import sentencepiece as spm
    os.makedirs(OUT, exist_ok=True)
    items = gen_strings()
    write_jsonl(os.path.join(OUT, "strings.jsonl"),
                [{"text": b.decode("utf-8")} if is_utf8(b) and b"\0" not in b else {"hex": b.hex()}
                 for b in items])

    vocab, scores, lookup = load_llama2c(os.path.join(SHARED, "models/stories260K/tok512.bin"))
    write_jsonl(os.path.join(OUT, "llama2c_ids.jsonl"),
                [{"i": i, "ids": encode_llama2c(vocab, scores, lookup, b)} for i, b in enumerate(items[:400])]
                + [{"i": i, "ids": encode_llama2c(vocab, scores, lookup, b)}
                   for i, b in enumerate(items) if i >= 400 and not is_utf8(b)])

    sp = spm.SentencePieceProcessor(model_file=os.path.join(SHARED, "models/llama2-tokenizer/tokenizer.model"))
    write_jsonl(os.path.join(OUT, "llama2_spm_ids.jsonl"),
                [{"i": i, "ids": sp.encode(b)} for i, b in enumerate(items)])

    bl = train_bytelevel()
    os.makedirs(os.path.join(OUT, "bytelevel"), exist_ok=True)
    bl.save(os.path.join(OUT, "bytelevel/tokenizer.json"))
    bl = Tokenizer.from_file(os.path.join(OUT, "bytelevel/tokenizer.json"))
    write_jsonl(os.path.join(OUT, "bytelevel_ids.jsonl"),
                [{"i": i, "ids": bl.encode(b.decode("utf-8"), add_special_tokens=False).ids}
                 for i, b in enumerate(items) if is_utf8(b)])

    base = json.load(open(os.path.join(OUT, "bytelevel/tokenizer.json"), encoding="utf-8"))
    for name in ("gpt2", "qwen2", "digits"):
        t = Tokenizer.from_str(json.dumps(bytelevel_variant(base, name)))
        write_jsonl(os.path.join(OUT, "bytelevel_%s_ids.jsonl" % name),
                    [{"i": i, "ids": t.encode(b.decode("utf-8"), add_special_tokens=False).ids}
                     for i, b in enumerate(items) if is_utf8(b)
                     and (name != "digits" or any(c.isdigit() for c in b.decode("utf-8")))])

    legacy, meta = train_spmbpe()
    for sub, js in (("spmbpe", legacy), ("spmbpe_meta", meta)):
        os.makedirs(os.path.join(OUT, sub), exist_ok=True)
        with open(os.path.join(OUT, sub, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(js, f, ensure_ascii=False)
    with open(os.path.join(OUT, "spmbpe/tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=1)
    for sub in ("spmbpe", "spmbpe_meta"):
        t = Tokenizer.from_file(os.path.join(OUT, sub, "tokenizer.json"))
        write_jsonl(os.path.join(OUT, sub + "_ids.jsonl"),
                    [{"i": i, "ids": t.encode(b.decode("utf-8"), add_special_tokens=False).ids}
                     for i, b in enumerate(items) if is_utf8(b)])
    print("%d strings (%d valid UTF-8)" % (len(items), sum(map(is_utf8, items))))


if __name__ == "__main__":
    main()
