#!/usr/bin/env python
"""Write every tiny test fixture under tests/fixtures/ in each benchmark's official on-disk format (``make fixtures``):
the pairwise, ranking, span and FEVER files here, Yelp's through ``yelp_fixtures.py``, the sequence tasks' (IWSLT'15,
IMDb, SST) through ``seq_fixtures.py``, AlgoLisp's through ``algolisp_fixtures.py`` and MLU's (400 / 60 / 60 pairs) through
``make_mlu.py``. ``tests/scripts/test_make_fixtures.py`` checks that it rewrites the committed files byte for byte.

The texts are synthetic (templates filled from small word lists, fixed seed), written by this project; they carry
a learnable signal so that an overfit run can reach high scores. Re-running the script rewrites identical files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path

from coda_exp.io import atomic_write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts below
import make_mlu
from algolisp_fixtures import make_algolisp
from seq_fixtures import make_imdb, make_iwslt, make_sst
from yelp_fixtures import write_yelp

ROOT = Path(__file__).resolve().parent.parent

SUBJECTS = ["a man", "a woman", "a child", "two dogs", "an old man", "a girl", "a boy", "three people"]
ACTIONS = [("playing a guitar", "making music", "sleeping"), ("riding a bike", "outside", "watching television"),
           ("eating an apple", "eating", "swimming in a lake"), ("reading a book", "reading", "running a race"),
           ("cooking dinner", "in a kitchen", "climbing a mountain"), ("painting a wall", "working", "dancing")]
PLACES = ["in the park", "on the street", "at home", "near the beach", "in a city"]
NEUTRAL_EXTRAS = ["for money", "because they are happy", "with a friend", "on a sunny day"]


def _parse(sentence: str) -> tuple[str, str]:
    toks = sentence.split()
    binary = "( " + " ".join(toks) + " )"
    return binary, "(ROOT (S " + " ".join(f"(X {t})" for t in toks) + "))"


def snli_rows(n: int, rng: random.Random, start: int) -> list[dict]:
    rows = []
    for k in range(n):
        subj, (act, entail, contra), place = rng.choice(SUBJECTS), rng.choice(ACTIONS), rng.choice(PLACES)
        premise = f"{subj.capitalize()} is {act} {place} ."
        label = ["entailment", "neutral", "contradiction"][k % 3]
        hyp = {"entailment": f"{subj.capitalize()} is {entail} .",
               "neutral": f"{subj.capitalize()} is {act} {rng.choice(NEUTRAL_EXTRAS)} .",
               "contradiction": f"{subj.capitalize()} is {contra} ."}[label]
        gold = "-" if k % 17 == 16 else label  # SNLI marks pairs without annotator consensus with "-"
        b1, p1 = _parse(premise)
        b2, p2 = _parse(hyp)
        rows.append({"annotator_labels": [label] * 5 if gold != "-" else [label, "neutral", "contradiction"],
                     "captionID": f"{1000 + start + k}.jpg#{k % 5}", "gold_label": gold,
                     "pairID": f"{1000 + start + k}.jpg#{k % 5}r1{label[0]}", "sentence1": premise,
                     "sentence1_binary_parse": b1, "sentence1_parse": p1, "sentence2": hyp,
                     "sentence2_binary_parse": b2, "sentence2_parse": p2})
    return rows


TOPICS = [("python", "programming language"), ("paris", "capital of france"), ("mars", "planet"),
          ("oak", "tree"), ("violin", "string instrument"), ("salmon", "fish"), ("everest", "mountain"),
          ("amazon", "river"), ("bach", "composer"), ("tokyo", "city in japan"), ("copper", "metal"),
          ("tulip", "flower"), ("nile", "river in africa"), ("jupiter", "gas giant"), ("chess", "board game"),
          ("latin", "language"), ("zebra", "animal"), ("sahara", "desert"), ("hamlet", "play"), ("rome", "city")]
FILLERS = ["It was first described in an old book .", "Many people visit it every year .",
           "The name has several spellings .", "It appears in numerous stories .",
           "Its history is long and complex .", "Scholars have debated its origin ."]


def wikiqa_rows(topics: list[tuple[str, str]], rng: random.Random, qstart: int,
                unanswered: int = 0) -> list[list[str]]:
    rows = []
    for qi, (name, what) in enumerate(topics):
        qid, did = f"Q{qstart + qi}", f"D{qstart + qi}"
        title = name.capitalize()
        cands = [(f"{title} is a {what} .", "1")] if qi >= unanswered else []
        cands += [(f"{title} : {f}", "0") for f in rng.sample(FILLERS, rng.randint(2, 4))]
        rng.shuffle(cands)
        for si, (sent, label) in enumerate(cands):
            rows.append([qid, f"what is {name}", did, title, f"{did}-{si}", sent, label])
    return rows


def write(out: Path) -> list[Path]:
    rng = random.Random(20191208)
    written = []
    snli = out / "snli"
    snli.mkdir(parents=True, exist_ok=True)
    for split, n, start in (("train", 72, 0), ("dev", 24, 100), ("test", 24, 200)):
        path = snli / f"snli_1.0_{split}.jsonl"
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in snli_rows(n, rng, start)))
        written.append(path)
    wiki = out / "wikiqa"
    wiki.mkdir(parents=True, exist_ok=True)
    header = ["QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label"]
    topics = list(TOPICS)
    rng.shuffle(topics)
    for split, (lo, hi), unanswered in (("train", (0, 12), 1), ("dev", (12, 16), 1), ("test", (16, 20), 1)):
        rows = wikiqa_rows(topics[lo:hi], rng, lo + 1, unanswered=unanswered)
        path = wiki / f"WikiQA-{split}.tsv"
        atomic_write_text(path, "\n".join("\t".join(r) for r in [header, *rows]) + "\n")
        written.append(path)
    return written + write_pairwise(out) + write_fever(out)


# ---- MNLI, SciTail, DNLI, TrecQA, UDC (CoDA Tables 2, 3, 8); each with its own seed so that adding one
# ---- benchmark never changes another's files

MATCHED_GENRES = ["fiction", "government", "slate", "telephone", "travel"]
MISMATCHED_GENRES = ["facetoface", "letters", "nineeleven", "oup", "verbatim"]


def mnli_rows(n: int, rng: random.Random, start: int, genres: list[str]) -> list[dict]:
    rows = snli_rows(n, rng, start)
    for k, row in enumerate(rows):
        for key in ("captionID", "sentence1_parse", "sentence2_parse"):
            row.pop(key)
        row["genre"] = genres[k % len(genres)]
        row["promptID"] = str(50000 + start + k)
        row["pairID"] = f"{50000 + start + k}{row['gold_label'][0] if row['gold_label'] != '-' else 'n'}"
    return rows


FACTS = [("plants", "make food from sunlight", "grow faster in the dark"),
         ("the moon", "orbits the earth", "is a star"), ("water", "boils at 100 degrees celsius", "is a metal"),
         ("magnets", "attract iron", "attract wood"), ("the heart", "pumps blood", "digests food"),
         ("ice", "is frozen water", "is hotter than steam"), ("bees", "pollinate flowers", "are mammals"),
         ("the sun", "is a star", "orbits the moon"), ("copper", "conducts electricity", "is a gas"),
         ("volcanoes", "erupt molten rock", "are made of ice")]


def scitail_rows(n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    rows = []
    for k in range(n):
        topic, true, other = rng.choice(FACTS)
        label = "entails" if k % 5 in (0, 2) else "neutral"  # SciTail is ~60 % neutral
        premise = f"Students learn that {topic} {true} in science class ."
        hyp = f"{topic.capitalize()} {true if label == 'entails' else other} ."
        rows.append((premise, hyp, label))
    return rows


PERSONA = [("i have a dog", "i have a pet", "i have no pets"), ("i am a teacher", "i work at a school",
           "i have never had a job"), ("i live in texas", "i live in the united states", "i live in france"),
           ("i love to cook", "cooking is my hobby", "i hate cooking"), ("i am married", "i have a wife",
           "i am single"), ("i play the piano", "i play an instrument", "i cannot play music")]
NEUTRAL_PERSONA = ["i like to read", "my favorite color is blue", "i drive a truck", "i enjoy hiking"]


def dnli_rows(n: int, rng: random.Random, split: str) -> list[dict]:
    rows = []
    for k in range(n):
        base, pos, neg = rng.choice(PERSONA)
        label = ["positive", "neutral", "negative"][k % 3]
        other = {"positive": pos, "neutral": rng.choice(NEUTRAL_PERSONA), "negative": neg}[label]
        rows.append({"id": f"dialogue_nli_{split}_{k}", "dtype": ["matchingtriple", "misc", "e2swap_up"][k % 3],
                     "label": label, "sentence1": f"{base} .", "sentence2": f"{other} .",
                     "triple1": ["i", "have", base.split()[-1]], "triple2": ["i", "have", other.split()[-1]]})
    return rows


def _tagged(tokens: list[str]) -> list[str]:
    """A jacana element body: tokens, then POS, dependency label, head and NER lines (dummy values)."""
    n = len(tokens)
    return ["\t".join(tokens), "\t".join(["NN"] * n), "\t".join(["NMOD"] * n),
            "\t".join(str(i) for i in range(n)), "\t".join(["-"] * n)]


def trecqa_questions(topics, rng: random.Random, qstart: int, all_pos: int = 0, all_neg: int = 0):
    """[(qid, question, [(answer, label), ...])]; the first ``all_pos`` questions have only correct candidates,
    the next ``all_neg`` only wrong ones (what TrecQA's clean evaluation drops)."""
    out = []
    for qi, (name, what) in enumerate(topics):
        pos = [f"{name.capitalize()} is a {what} ."]
        neg = [f"{name.capitalize()} : {f}" for f in rng.sample(FILLERS, rng.randint(2, 3))]
        if qi < all_pos:
            cands = [(pos[0], 1), (f"Experts agree {name} is a {what} .", 1)]
        elif qi < all_pos + all_neg:
            cands = [(c, 0) for c in neg]
        else:
            cands = [(pos[0], 1)] + [(c, 0) for c in neg]
            rng.shuffle(cands)
        out.append((f"{qstart + qi}.{qi % 3 + 1}", f"What is {name} ?", cands))
    return out


def trecqa_xml(questions) -> str:
    lines = []
    for qid, question, cands in questions:
        lines += [f"<QApairs id='{qid}'>", "<question>", *_tagged(question.split()), "</question>"]
        for text, label in cands:
            tag = "positive" if label else "negative"
            lines += [f"<{tag}>", *_tagged(text.split()), f"</{tag}>"]
        lines.append("</QApairs>")
    return "\n".join(lines) + "\n"


UDC_TOPICS = [("wifi", "restart network-manager with sudo service network-manager restart"),
              ("sound", "open alsamixer and unmute the master channel"),
              ("grub", "run sudo update-grub after editing /etc/default/grub"),
              ("nvidia", "install the driver with sudo apt-get install nvidia-current"),
              ("mount", "add the partition to /etc/fstab and run sudo mount -a"),
              ("java", "install openjdk with sudo apt-get install default-jdk"),
              ("firefox", "clear the cache in the firefox preferences"),
              ("ssh", "check that openssh-server is installed and port 22 is open"),
              ("printer", "add the printer in system settings printing"),
              ("upgrade", "use sudo do-release-upgrade to move to the next release"),
              ("swap", "create a swap file with fallocate and mkswap"),
              ("keyboard", "change the layout in text entry settings")]


def udc_context(topic: str, rng: random.Random) -> str:
    opener = rng.choice(["hi all", "hello", "hey guys", "anyone around"])
    return (f"{opener} __eou__ my {topic} is broken since the update __eou__ __eot__ "
            f"which {topic} problem exactly ? __eou__ __eot__ it just stops working with {topic} __eou__ __eot__")


def udc_files(rng: random.Random) -> dict[str, list[list[str]]]:
    train = [["Context", "Utterance", "Label"]]
    for k in range(64):
        topic, answer = UDC_TOPICS[k % len(UDC_TOPICS)]
        if k % 2 == 0:
            train.append([udc_context(topic, rng), f"for {topic} {answer} __eou__", "1"])
        else:
            wrong_topic, wrong = rng.choice([t for t in UDC_TOPICS if t[0] != topic])
            train.append([udc_context(topic, rng), f"for {wrong_topic} {wrong} __eou__", "0"])
    out = {"train": train}
    header = ["Context", "Ground Truth Utterance"] + [f"Distractor_{i}" for i in range(9)]
    for split, offset in (("valid", 0), ("test", 6)):
        rows = [header]
        for k in range(6):
            topic, answer = UDC_TOPICS[(k + offset) % len(UDC_TOPICS)]
            distractors = rng.sample([t for t in UDC_TOPICS if t[0] != topic], 9)
            rows.append([udc_context(topic, rng), f"for {topic} {answer} __eou__"]
                        + [f"for {t} {a} __eou__" for t, a in distractors])
        out[split] = rows
    return out


def write_pairwise(out: Path) -> list[Path]:
    import csv
    import io

    written = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        written.append(path)

    rng = random.Random(5)
    for split, n, start, genres in (("train", 90, 0, MATCHED_GENRES), ("dev_matched", 24, 100, MATCHED_GENRES),
                                    ("dev_mismatched", 24, 200, MISMATCHED_GENRES)):
        rows = mnli_rows(n, rng, start, genres)
        put(out / "mnli" / f"multinli_1.0_{split}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    rng = random.Random(6)
    for split, n in (("train", 60), ("dev", 20), ("test", 20)):
        rows = scitail_rows(n, rng)
        put(out / "scitail" / "tsv_format" / f"scitail_1.0_{split}.tsv", "".join("\t".join(r) + "\n" for r in rows))
        snli = [{"annotator_labels": [lab], "gold_label": "entailment" if lab == "entails" else lab,
                 "sentence1": p, "sentence2": h} for p, h, lab in rows]
        put(out / "scitail" / "snli_format" / f"scitail_1.0_{split}.txt", "".join(json.dumps(r) + "\n" for r in snli))
    rng = random.Random(7)
    for split, n in (("train", 72), ("dev", 24), ("test", 24)):
        put(out / "dnli" / f"dialogue_nli_{split}.jsonl", json.dumps(dnli_rows(n, rng, split)))  # one JSON array
    rng = random.Random(8)
    topics = list(TOPICS)
    rng.shuffle(topics)
    splits = (("TRAIN-ALL", "train-all", topics[:12], 0, 0), ("DEV", "raw-dev", topics[12:16], 1, 1),
              ("TEST", "raw-test", topics[16:20], 1, 1))
    for i, (xml_name, folder, tops, all_pos, all_neg) in enumerate(splits):
        questions = trecqa_questions(tops, rng, 100 * (i + 1), all_pos, all_neg)
        put(out / "trecqa" / f"{xml_name}.xml", trecqa_xml(questions))
        flat = [(qid, q, a, y) for qid, q, cands in questions for a, y in cands]
        for name, col in (("id.txt", 0), ("a.toks", 1), ("b.toks", 2), ("sim.txt", 3)):
            put(out / "trecqa" / "toks" / folder / name, "".join(f"{r[col]}\n" for r in flat))
    rng = random.Random(9)
    for split, rows in udc_files(rng).items():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        put(out / "udc" / f"{split}.csv", buf.getvalue())
    return written


# ---- FEVER (AttConv Table 9): a tiny wiki-pages dump holding every page the claims cite, and the claim files

FEVER_PAGES = [("Paris", "capital of france"), ("Mars", "planet"), ("Oak", "tree"), ("Violin", "string instrument"),
               ("Salmon", "fish"), ("Everest", "mountain"), ("Bach", "composer"), ("Copper", "metal"),
               ("Zürich", "city in switzerland"), ("Chess", "board game"), ("Hamlet_-LRB-play-RRB-", "play"),
               ("Tulip", "flower")]


def fever_files(rng: random.Random) -> dict[str, str]:
    """wiki-pages/wiki-00{1,2}.jsonl and train/paper_dev/paper_test.jsonl: a claim SUPPORTS when it restates
    sentence 0 of its page, REFUTES when it names another page's kind; NOT ENOUGH INFO claims cite nothing."""
    pages, files = [], {}
    for title, what in FEVER_PAGES:
        name = title.split("_")[0]
        lines = [f"{name} is a {what} .", *rng.sample(FILLERS, 3), f"{name} was named in {rng.randint(1500, 1900)} ."]
        pages.append({"id": title, "text": " ".join(lines),
                      "lines": "\n".join(f"{i}\t{s}" + ("\tlink" if i == 0 else "") for i, s in enumerate(lines))})
    files["wiki-pages/wiki-001.jsonl"] = "".join(json.dumps(p) + "\n" for p in [{"id": "", "text": "", "lines": ""},
                                                                               *pages[:6]])
    files["wiki-pages/wiki-002.jsonl"] = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages[6:])
    cid = 100
    for split, n in (("train", 36), ("paper_dev", 12), ("paper_test", 12)):
        rows = []
        for k in range(n):
            cid += 1
            (title, what), label = rng.choice(FEVER_PAGES), ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")[k % 3]
            name = title.split("_")[0]
            other = rng.choice([w for _, w in FEVER_PAGES if w != what])
            claim = {"SUPPORTS": f"{name} is a {what} .", "REFUTES": f"{name} is a {other} .",
                     "NOT ENOUGH INFO": f"{name} is loved by {rng.choice(['many', 'few', 'some'])} critics ."}[label]
            evidence = [[[cid, None, None, None]]]
            if label != "NOT ENOUGH INFO":
                evidence = [[[cid, 9000 + cid, title, 0]]]
                if k % 4 == 0:  # a second gold set of two sentences
                    evidence.append([[cid, 9500 + cid, title, 0], [cid, 9600 + cid, title, 4]])
            rows.append({"id": cid, "verifiable": "NOT VERIFIABLE" if label == "NOT ENOUGH INFO" else "VERIFIABLE",
                         "label": label, "claim": claim, "evidence": evidence})
        files[f"{split}.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return files


def write_fever(out: Path) -> list[Path]:
    written = []
    for name, text in fever_files(random.Random(10)).items():
        path = out / "fever" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        written.append(atomic_write_text(path, text))
    return written


def write_span(out: Path) -> list[Path]:
    """Quasar-T (gzip JSON lines), SearchQA (.txt); an answer absent when k % 7 == 3, no passage when k % 11 == 5."""
    written, rng = [], random.Random(11)
    for split, sqa, n in (("train", "train", 24), ("dev", "val", 8), ("test", "test", 8)):
        rows = []
        for k, ((title, what), other) in enumerate((rng.choice(FEVER_PAGES), rng.choice(FILLERS)) for _ in range(n)):
            name = title.split("_")[0]
            ps = rng.sample([f"{name} is {'known as the ' + what if k % 7 != 3 else 'unknown'} of the region .",
                             other, f"Many say {other.lower()}"], 3)
            rows.append((f"{split}{k}", f"What is {name} known as ?", f"the {what.title()}", [] if k % 11 == 5 else ps))
        files = {f"questions/{split}_questions.json.gz": [{"uid": u, "question": q, "answer": a} for u, q, a, _ in rows]}
        for kind, extra in (("short", []), ("long", ["A longer pseudo-document follows ."])):
            files[f"contexts/{kind}/{split}_contexts.json.gz"] = [
                {"uid": u, "contexts": [[1 - i / 10, p] for i, p in enumerate(extra + ps)]} for u, _, _, ps in rows]
        for name, objs in files.items():  # gzip without a time stamp: rewriting gives identical bytes
            written.append(out / "quasart" / name)
            written[-1].parent.mkdir(parents=True, exist_ok=True)
            written[-1].write_bytes(gzip.compress("".join(json.dumps(o) + "\n" for o in objs).encode(), mtime=0))
        text = "".join(" ".join(f"<s> {p} </s>" for p in ps) + f" ||| {q} ||| {a}\n" for _, q, a, ps in rows)
        written.append(atomic_write_text(out / "searchqa" / f"{sqa}.txt", text))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures")
    args = ap.parse_args(argv)
    for p in [*write(args.out), *write_yelp(args.out), *write_span(args.out)]:
        print(p)
    make_iwslt(args.out / "iwslt15_envi", random.Random(15))
    make_imdb(args.out / "imdb", random.Random(2011))
    make_sst(args.out / "sst", random.Random(2013))
    (args.out / "algolisp").mkdir(parents=True, exist_ok=True)
    make_algolisp(args.out / "algolisp")
    make_mlu.main(["--out-dir", str(args.out / "mlu"), "--num-train", "400", "--num-dev", "60", "--num-test", "60"])
    print(", ".join(str(args.out / name) for name in ("iwslt15_envi", "imdb", "sst", "algolisp", "mlu")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
