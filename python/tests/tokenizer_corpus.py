"""A deterministic corpus of test strings for the runtime's tokenizer.

`corpus()` gives at least 2,000 strings, the same on every run (a seeded
generator over fixed tables): English prose, a dozen languages and scripts,
emoji (4-byte characters, ZWJ sequences, flags, skin tones), combining marks
(decomposed letters, which NFC composes), code, runs of spaces, tabs and
newlines, digits, contractions in both cases, punctuation, strings holding the
families' special tokens, and random mixtures of all of these.

Left out, with the reason: U+0085, U+180E and U+FEFF, where the three regex
engines' `\\s` disagree (Hugging Face's Oniguruma counts U+0085 as white space,
PCRE2 adds U+180E, JavaScript adds U+FEFF; the runtime follows Hugging Face,
and test_tokenizer_corpus.py checks U+0085 by itself); characters assigned
after Unicode 14 (PCRE2 10.42's tables); lone surrogates (not UTF-8).

`invalid_utf8()` gives byte strings that are not UTF-8, which the runtime
must refuse with the offset of the first bad byte.
"""

import random

ENGLISH_WORDS = (
    "the quick brown fox jumps over a lazy dog while its owner reads an old "
    "book about compilers kernels tokens weights memory caches threads models "
    "Arm NEON SME2 matrix vector panel quantized rotated codebook inference "
    "latency throughput decode prefill attention layer norm embedding vocabulary "
    "I you he she it we they don't won't can't isn't it's we're they've I'll "
    "she'd HE'S THEY'LL We'Re you'VE").split()

SCRIPTS = {
    "zh": "我们今天在学习如何把文本切分成词元然后再把它们拼回原来的句子模型会逐个生成",
    "ja": "これは日本語の文章ですカタカナとひらがなと漢字が混ざっていますトークナイザー",
    "ko": "안녕하세요 오늘은 토크나이저를 시험합니다 한국어 문장도 잘 처리해야 합니다",
    "ar": "مرحبا بالعالم هذه جملة عربية لاختبار المحلل اللغوي والنص من اليمين",
    "he": "שלום עולם זהו משפט בעברית לבדיקת המפצל",
    "ru": "Привет мир это русское предложение для проверки токенизатора Ёлка",
    "el": "Γειά σου κόσμε αυτή είναι μια ελληνική πρόταση ΑΒΓΔ",
    "hi": "नमस्ते दुनिया यह हिंदी का वाक्य है जिसमें मात्राएँ हैं",
    "th": "สวัสดีชาวโลกนี่คือประโยคภาษาไทยที่ไม่มีช่องว่าง",
    "vi": "Xin chào thế giới đây là câu tiếng Việt có dấu thanh điệu ữ ẫ ặ",
    "tr": "Merhaba dünya İstanbul ışık ğüşöç ĞÜŞÖÇ",
    "de": "Grüße aus München Straße Äpfel Öl Übermut ß",
    "fr": "Voilà l'été où ça a commencé garçon cœur Noël",
    "es": "¿Dónde está la biblioteca? ¡Mañana será otro día! niño",
    "pl": "Zażółć gęślą jaźń",
    "am": "ሰላም ልዑል ዓለም",
    "ka": "გამარჯობა მსოფლიო",
    "hy": "Բարեւ աշխարհ",
    "ta": "வணக்கம் உலகம்",
}

EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🎉", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇫🇷",
         "❤️", "✨", "🧠", "🦀", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "𠀋", "𩸽", "🀄", "♟️"]

COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "n\u0303", "A\u030a", "c\u0327",
             "u\u031b\u0301", "i\u0307", "z\u030c", "\u1100\u1161\u11a8", "ᄀ\u1161",
             "e\u0301\u0301", "\u0915\u094d\u0937", "q\u0307\u0323", "x\u0336"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    '{"name": "cq4p", "version": [0, 1], "ok": true, "pi": 3.14159}',
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const x = async () => { await fetch('/api?q=1&r=2'); };",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "<div class=\"a\">&lt;tag&gt; &amp; text</div>",
    "x = [i for i in range(10) if i % 2 == 0]  \t\n\n",
    "git commit -m 'fix: off-by-one in loop'  && make -j8",
    "$ echo $HOME | sed -e 's/\\/root/~/'",
    "    indented\n        more\n\t\ttabs\r\n",
]

PUNCTUATION = ["...", "!!!", "?!", "---", "—", "–", "«»", "“quoted”", "‘single’", "()", "[]{}",
               "@#$%^&*", "~`|\\", "。", "、", "！", "？", "・", "…", "§¶", "©®™", "±×÷"]

WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", " \t ", "\u00a0", "\u3000",
              "\u2003", "\u2028", "\r"]

SPECIAL_TOKENS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|reserved_special_token_3|>",
    "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>", "<unk>", "<mask>",
    "<unused0>", "<start_of_image>", "<|im_start", "im_end|>", "<<|im_end|>>", "<bos",
]


def _words(rng, count):
    return " ".join(rng.choice(ENGLISH_WORDS) for _ in range(count))


def _number(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 15)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 6)}f}"
    if kind == 2:
        return ",".join(str(rng.randrange(1000)) for _ in range(rng.randrange(1, 5)))
    if kind == 3:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 40)))
    return f"{rng.randrange(1, 13)}/{rng.randrange(1, 29)}/{rng.randrange(1900, 2100)}"


def _pool():
    """Characters to mix: everything above, as single code points."""
    chars = set()
    for text in list(SCRIPTS.values()) + EMOJI + COMBINING + CODE + PUNCTUATION:
        chars.update(text)
    chars.update(" \t\n")
    chars.update("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"")
    chars.discard("\u0085")
    chars.discard("\u180e")
    chars.discard("\ufeff")
    return sorted(chars)


def corpus(seed=20261201):
    rng = random.Random(seed)
    pool = _pool()
    out = ["", " ", "a", "Hello, my dog is cute. 12345 café", "😀 x", "\n", "  \n  ",
           "I'm", "I'M", "don't", "DON'T", "'s", "''", "'", " 's"]
    for _ in range(250):
        out.append(_words(rng, rng.randrange(1, 30)) + rng.choice([".", "!", "?", "", ","]))
    for name, text in sorted(SCRIPTS.items()):
        out.append(text)
        for _ in range(12):
            start = rng.randrange(len(text))
            out.append(text[start:start + rng.randrange(1, 40)])
            out.append(_words(rng, 3) + " " + text[start:start + 10] + " " + _number(rng))
    for _ in range(150):
        out.append("".join(rng.choice(EMOJI) + rng.choice(["", " ", "x", "\n"])
                           for _ in range(rng.randrange(1, 6))))
    for _ in range(150):
        out.append(" ".join(rng.choice(COMBINING) * rng.randrange(1, 3) + rng.choice(["", "s", "á"])
                            for _ in range(rng.randrange(1, 5))))
    for text in CODE:
        out.append(text)
    for _ in range(120):
        out.append("".join(rng.choice(CODE)[rng.randrange(5):] for _ in range(2)))
    for _ in range(150):
        out.append("".join(rng.choice(WHITESPACE) * rng.randrange(1, 12) + rng.choice(["", "a", "b c", "1"])
                           for _ in range(rng.randrange(1, 5))))
    for n in (16, 31, 64, 100, 257, 1000):
        out.append(" " * n)
        out.append("word" + " " * n + "word")
        out.append("\n" * n)
        out.append("\t" * n + "x")
        out.append("a" * n)
        out.append("ab" * n)
    for _ in range(200):
        out.append(_number(rng) + rng.choice(["", " ", "x", ".", " apples", "km"]) + _number(rng))
    for _ in range(250):
        parts = []
        for _ in range(rng.randrange(1, 6)):
            parts.append(rng.choice([rng.choice(SPECIAL_TOKENS), _words(rng, rng.randrange(0, 4)),
                                     rng.choice(WHITESPACE), rng.choice(EMOJI)]))
        out.append("".join(parts))
    for _ in range(100):
        out.append(rng.choice(PUNCTUATION) * rng.randrange(1, 4) + _words(rng, 2)
                   + rng.choice(PUNCTUATION))
    for _ in range(450):
        out.append("".join(rng.choice(pool) for _ in range(rng.randrange(1, 60))))
    # A few long documents.
    for _ in range(5):
        out.append("\n\n".join(_words(rng, 80) + " " + rng.choice(list(SCRIPTS.values()))
                               + " " + rng.choice(CODE) for _ in range(6)))
    return out


def invalid_utf8():
    """Byte strings that are not UTF-8: (bytes, offset of the first bad byte)."""
    return [
        (b"\xff", 0), (b"abc\x80def", 3), (b"\xc3", 0), (b"ok \xc3\x28", 3),
        (b"\xe2\x82", 0), (b"\xed\xa0\x80", 0),  # a UTF-16 surrogate
        (b"\xf4\x90\x80\x80", 0),  # past U+10FFFF
        (b"\xc0\xaf", 0),  # overlong
        (b"caf\xe9", 3), (b"\xf0\x9f\x98", 0), (b"x" * 100 + b"\xfe", 100),
    ]
