#!/usr/bin/env python
"""The sequence-task fixture writers that ``make_fixtures.py`` (``make fixtures``) calls, each benchmark in its
official on-disk format:

* ``iwslt15_envi/``: the Stanford IWSLT'15 release layout, ``{train,tst2012,tst2013}.{en,vi}`` + ``vocab.{en,vi}``
  (tokenized text with ``&apos;`` escapes; ``train.en`` starts with a UTF-8 byte-order mark and ``tst2013.vi``
  lacks its final newline, as real-world copies sometimes do; ``tst2013`` has a word missing from the vocabulary);
* ``imdb/aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt`` (8 reviews per folder, with ``<br />`` tags);
* ``sst/stsa.{binary,fine}.{train,dev,test}`` (``<label> <sentence>`` per line).

The texts are synthetic (templates over small word lists, fixed seed), written by this project, with a learnable
signal. Re-running the script rewrites identical files.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from coda_exp.io import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent

# English -> Vietnamese word pairs (a toy lexicon; translations are word by word, in order)
LEXICON = [("i", "tôi"), ("you", "bạn"), ("we", "chúng_tôi"), ("they", "họ"), ("see", "thấy"), ("like", "thích"),
           ("read", "đọc"), ("write", "viết"), ("a", "một"), ("the", "cái"), ("book", "sách"), ("house", "nhà"),
           ("river", "sông"), ("song", "bài_hát"), ("today", "hôm_nay"), ("now", "bây_giờ"), ("big", "lớn"),
           ("small", "nhỏ"), ("new", "mới"), ("old", "cũ")]
EN_VI = dict(LEXICON)
SUBJ, VERB, DET, NOUN, ADJ, TIME = (["i", "you", "we", "they"], ["see", "like", "read", "write"], ["a", "the"],
                                    ["book", "house", "river", "song"], ["big", "small", "new", "old"],
                                    ["today", "now"])

POS_WORDS = ["great", "wonderful", "moving", "brilliant", "funny", "beautiful"]
NEG_WORDS = ["awful", "boring", "dull", "terrible", "clumsy", "painful"]
FILLER = ["the plot", "the acting", "the music", "the ending", "the cast", "the script", "the director's work"]
NEUTRAL = ["ordinary", "average", "predictable", "fine", "familiar", "modest"]


def en_vi_pair(rng: random.Random) -> tuple[str, str]:
    words = [rng.choice(SUBJ), rng.choice(VERB), rng.choice(DET), rng.choice(ADJ), rng.choice(NOUN)]
    if rng.random() < 0.4:
        words.append(rng.choice(TIME))
    en = " ".join(words)
    vi = " ".join(EN_VI[w] for w in words)
    if rng.random() < 0.3:  # Moses escapes, as in the Stanford files
        en, vi = f"{en} , it &apos;s true", f"{vi} , đúng &quot; vậy &quot;"
    return en + " .", vi + " ."


def write(path: Path, text: str, bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, ("\ufeff" if bom else "") + text)


def make_iwslt(out: Path, rng: random.Random) -> None:
    sizes = {"train": 40, "tst2012": 12, "tst2013": 12}
    counts = {"en": Counter(), "vi": Counter()}
    for prefix, n in sizes.items():
        pairs = [en_vi_pair(rng) for _ in range(n)]
        if prefix == "tst2013":  # a word outside the vocabulary: becomes <unk> with the word vocabulary
            pairs[0] = ("i see a zebra .", "tôi thấy một ngựa_vằn .")
        en, vi = [p[0] for p in pairs], [p[1] for p in pairs]
        if prefix == "train":
            for lang, lines in (("en", en), ("vi", vi)):
                for line in lines:
                    counts[lang].update(line.split())
        write(out / f"{prefix}.en", "\n".join(en) + "\n", bom=prefix == "train")
        write(out / f"{prefix}.vi", "\n".join(vi) + ("" if prefix == "tst2013" else "\n"))
    for lang in ("en", "vi"):
        ranked = sorted(counts[lang], key=lambda t: (-counts[lang][t], t))
        write(out / f"vocab.{lang}", "\n".join(["<unk>", "<s>", "</s>", *ranked]) + "\n")


def review(rng: random.Random, positive: bool) -> str:
    good, bad = (POS_WORDS, NEG_WORDS) if positive else (NEG_WORDS, POS_WORDS)
    parts = [f"I watched this film {rng.choice(['last night', 'twice', 'on TV', 'with friends'])}."]
    for _ in range(rng.randint(2, 4)):
        parts.append(f"{rng.choice(FILLER).capitalize()} was {rng.choice(good)}.")
    parts.append(f"Only {rng.choice(FILLER)} felt {rng.choice(bad)}, but overall it was {rng.choice(good)}!")
    text = " ".join(parts)
    cut = text.index(". ") + 1  # a paragraph break, as in the real reviews
    return text[:cut] + "<br /><br />" + text[cut + 1:]


def make_imdb(out: Path, rng: random.Random) -> None:
    next_id = {"train": 0, "test": 0}
    for part in ("train", "test"):
        for cls in ("neg", "pos"):
            for _ in range(8):
                rating = rng.randint(7, 10) if cls == "pos" else rng.randint(1, 4)
                write(out / "aclImdb" / part / cls / f"{next_id[part]}_{rating}.txt", review(rng, cls == "pos"))
                next_id[part] += 1


def sst_sentence(rng: random.Random, label: int, classes: int) -> str:
    if classes == 2:
        words = POS_WORDS if label == 1 else NEG_WORDS
        return f"{rng.choice(FILLER).lower()} is {rng.choice(words)} and {rng.choice(words)} ."
    if label == 2:
        return f"{rng.choice(FILLER).lower()} is {rng.choice(NEUTRAL)} ."
    words = POS_WORDS if label > 2 else NEG_WORDS
    strength = "truly" if label in (0, 4) else "somewhat"
    return f"{rng.choice(FILLER).lower()} is {strength} {rng.choice(words)} ."


def make_sst(out: Path, rng: random.Random) -> None:
    for name, classes in (("binary", 2), ("fine", 5)):
        for split, n in (("train", 30), ("dev", 10), ("test", 10)):
            lines = []
            for k in range(n):
                label = k % classes
                lines.append(f"{label} {sst_sentence(rng, label, classes)}")
            write(out / f"stsa.{name}.{split}", "\n".join(lines) + "\n")
