"""IWSLT'15 English→Vietnamese (CoDA paper Tables 4, 8, 9): the Stanford NMT release, or the hub copy.

Local layout (https://nlp.stanford.edu/projects/nmt/, "IWSLT'15 English-Vietnamese"): one directory holding
``train.{en,vi}`` (133,317 pairs), ``tst2012.{en,vi}`` (1,553, our validation split), ``tst2013.{en,vi}``
(1,268, our test split) and ``vocab.{en,vi}``. The text is already tokenized (Moses tokenizer, with ``&apos;``
/ ``&quot;`` escapes): the paper's BLEU is tokenized BLEU on these files (see ``coda_exp.metrics.bleu``).
Files are parallel line by line; a UTF-8 byte-order mark and a missing final newline are tolerated, lines are
split on ``"\\n"`` only (``\\r`` stripped) so that line numbers agree with ``wc -l`` and the references.

Without a directory the hub dataset ``mt_eng_vietnamese`` (config ``iwslt2015-en-vi``, rows
``{"translation": {"en": ..., "vi": ...}}``, splits train/validation/test) is read instead; its splits are
meant to be the same Stanford files, but check their sizes against the numbers above before comparing with
the paper.

Examples are ``{"src", "tgt", "index"}`` where ``index`` is the 0-based line number in the files, so that
predictions line up with the reference file even when empty pairs are dropped (``drop_empty``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.tokenization import WordVocabTokenizer

SPLITS = ("train", "validation", "test")


def read_lines(path: Path) -> list[str]:
    """The lines of a text file: BOM dropped, split on ``\\n`` only, ``\\r`` stripped, no final empty line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 ({e.reason}); expected UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline (absent in some files: then nothing to drop)
    return [ln.rstrip("\r") for ln in lines]


def read_parallel(src_path: Path, tgt_path: Path, drop_empty: bool = False) -> Iterator[dict]:
    """Pairs of two line-aligned files; an error names both files and their line counts when they differ."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"parallel files differ in length: {src_path} has {len(src)} lines but {tgt_path} has "
                        f"{len(tgt)}; they must be aligned line by line")
    for i, (s, t) in enumerate(zip(src, tgt)):
        if drop_empty and (not s.strip() or not t.strip()):
            continue
        yield {"src": s, "tgt": t, "index": i}


@dataclass(frozen=True)
class ParallelReader:
    """A translation benchmark: ``{prefix}.{src_lang}`` / ``{prefix}.{tgt_lang}`` per split, vocabularies."""

    name: str
    src_lang: str
    tgt_lang: str
    prefixes: dict[str, str]
    vocab_prefix: str
    hub_id: str | None
    hub_config: str | None
    source_hint: str

    def expected_files(self) -> list[str]:
        return [f"{p}.{lang}" for p in self.prefixes.values() for lang in (self.src_lang, self.tgt_lang)] + \
               [f"{self.vocab_prefix}.{lang}" for lang in (self.src_lang, self.tgt_lang)]

    def _check_dir(self, directory: Path, needed: list[str]) -> None:
        require_files(self.name, directory, needed, self.expected_files(), self.source_hint)

    def paths(self, directory: str | os.PathLike, split: str) -> tuple[Path, Path]:
        if split not in self.prefixes:
            raise DataError(f"{self.name}: unknown split {split!r}; expected one of {list(self.prefixes)}")
        directory = Path(directory)
        names = [f"{self.prefixes[split]}.{lang}" for lang in (self.src_lang, self.tgt_lang)]
        self._check_dir(directory, names)
        return directory / names[0], directory / names[1]

    def vocab_paths(self, directory: str | os.PathLike | None) -> tuple[Path, Path]:
        if directory is None:
            raise DataError(f"{self.name}: the word vocabularies {self.vocab_prefix}.{{{self.src_lang},"
                            f"{self.tgt_lang}}} come with the local files only (the hub copy has none); pass "
                            f"data.dir=DIR or use the BPE tokenizer. {self.source_hint}")
        directory = Path(directory)
        names = [f"{self.vocab_prefix}.{lang}" for lang in (self.src_lang, self.tgt_lang)]
        self._check_dir(directory, names)
        return directory / names[0], directory / names[1]

    def vocabularies(self, directory: str | os.PathLike | None) -> tuple[WordVocabTokenizer, WordVocabTokenizer]:
        src, tgt = self.vocab_paths(directory)
        return WordVocabTokenizer.from_file(src), WordVocabTokenizer.from_file(tgt)

    def read_local(self, directory: str | os.PathLike, split: str, drop_empty: bool = False) -> Iterator[dict]:
        yield from read_parallel(*self.paths(directory, split), drop_empty=drop_empty)

    def read_hub(self, split: str, drop_empty: bool = False) -> Iterator[dict]:
        import datasets

        for i, row in enumerate(datasets.load_dataset(self.hub_id, self.hub_config, split=split)):
            pair = row["translation"]
            s, t = pair[self.src_lang], pair[self.tgt_lang]
            if drop_empty and (not s.strip() or not t.strip()):
                continue
            yield {"src": s, "tgt": t, "index": i}

    def read(self, split: str, directory: str | os.PathLike | None = None, drop_empty: bool = False
             ) -> Iterator[dict]:
        """Examples of ``split`` from ``directory`` or, when it is None, from the hub."""
        if directory is not None:
            yield from self.read_local(directory, split, drop_empty)
            return
        try:
            yield from self.read_hub(split, drop_empty)
        except DataError:
            raise
        except Exception as e:
            raise DataError(f"{self.name}: no data directory was given and the hub dataset {self.hub_id!r} "
                            f"(config {self.hub_config!r}) could not be loaded ({type(e).__name__}: {e}). "
                            f"Download {', '.join(self.expected_files())} and pass data.dir=DIR. "
                            f"{self.source_hint}") from e


IWSLT15_ENVI = ParallelReader(
    name="iwslt15_envi",
    src_lang="en",
    tgt_lang="vi",
    prefixes={"train": "train", "validation": "tst2012", "test": "tst2013"},
    vocab_prefix="vocab",
    hub_id="mt_eng_vietnamese",
    hub_config="iwslt2015-en-vi",
    source_hint="Get them from https://nlp.stanford.edu/projects/nmt/ (IWSLT'15 English-Vietnamese: train.en, "
                "train.vi, tst2012.*, tst2013.*, vocab.*).",
)
