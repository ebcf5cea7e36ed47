"""IWSLT'15 English→Vietnamese (CoDA paper Tables 4, 8, 9): the Stanford NMT release, or the hub copy.

Local layout (https://nlp.stanford.edu/projects/nmt/, "IWSLT'15 English-Vietnamese"): one directory holding
``train.{en,vi}`` (133,317 pairs), ``tst2012.{en,vi}`` (1,553, our validation split), ``tst2013.{en,vi}``
(1,268, our test split) and ``vocab.{en,vi}``. The text is already tokenized (Moses tokenizer, with ``&apos;``
/ ``&quot;`` escapes): the paper's BLEU is Tensor2Tensor's t2t-bleu of text in this form against these reference
lines, escapes and all (``coda_exp.metrics.bleu.t2t_bleu``).
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

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import read_lines
from coda_exp.data.common.readers import Reader, register
from coda_exp.data.common.vocab import Vocab


def read_parallel(src_path: Path, tgt_path: Path, split: str | None = None, drop_empty: bool = False
                  ) -> Iterator[dict]:
    """Pairs of two line-aligned files; an error names both files and their line counts when they differ."""
    src, tgt = read_lines(src_path, split, "one sentence per line"), read_lines(tgt_path, split, "one sentence per line")
    if len(src) != len(tgt):
        raise DataError(f"parallel files differ in length: {src_path} has {len(src)} lines but {tgt_path} has "
                        f"{len(tgt)}; they must be aligned line by line")
    for i, (s, t) in enumerate(zip(src, tgt)):
        if drop_empty and (not s.strip() or not t.strip()):
            continue
        yield {"src": s, "tgt": t, "index": i}


@dataclass(frozen=True)
class ParallelReader(Reader):
    """A translation benchmark: ``{prefix}.{src_lang}`` / ``{prefix}.{tgt_lang}`` per split, vocabularies.
    Pairs with an empty side are dropped from the splits in ``drop_empty`` (training), kept elsewhere."""

    src_lang: str = "en"
    tgt_lang: str = "vi"
    prefixes: dict[str, str] = field(default_factory=dict)
    vocab_prefix: str = "vocab"
    hub_config: str | None = None
    drop_empty: tuple[str, ...] = ("train",)

    def expected_files(self) -> list[str]:
        return [f"{p}.{lang}" for p in self.prefixes.values() for lang in (self.src_lang, self.tgt_lang)] + \
               [f"{self.vocab_prefix}.{lang}" for lang in (self.src_lang, self.tgt_lang)]

    def layout(self) -> str:
        return ", ".join(self.expected_files())

    def _files(self, directory: Path, prefix: str) -> list[Path]:
        names = [f"{prefix}.{lang}" for lang in (self.src_lang, self.tgt_lang)]
        require_files(self.name, directory, names, self.expected_files(), self.source_hint)
        return [directory / n for n in names]

    def local_files(self, directory: Path, split: str) -> list[Path]:
        return self._files(directory, self.prefixes[split])

    def vocabularies(self, directory: str | Path | None) -> tuple[Vocab, Vocab]:
        if directory is None:
            raise DataError(f"{self.name}: the word vocabularies {self.vocab_prefix}.{{{self.src_lang},"
                            f"{self.tgt_lang}}} come with the local files only (the hub copy has none); pass "
                            f"data.dir=DIR or use the BPE tokenizer. {self.source_hint}")
        src, tgt = self._files(Path(directory), self.vocab_prefix)
        return Vocab.from_file(src), Vocab.from_file(tgt)

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        yield from read_parallel(*self.local_files(directory, split), split=split,
                                 drop_empty=split in self.drop_empty)

    def read_hub(self, split: str) -> Iterator[dict]:
        import datasets

        for i, row in enumerate(datasets.load_dataset(self.hub_id, self.hub_config, split=split)):
            pair = row["translation"]
            s, t = pair[self.src_lang], pair[self.tgt_lang]
            if split in self.drop_empty and (not s.strip() or not t.strip()):
                continue
            yield {"src": s, "tgt": t, "index": i}


IWSLT15_ENVI = register(ParallelReader(
    name="iwslt15_envi",
    src_lang="en",
    tgt_lang="vi",
    prefixes={"train": "train", "validation": "tst2012", "test": "tst2013"},
    vocab_prefix="vocab",
    hub_id="mt_eng_vietnamese",
    hub_config="iwslt2015-en-vi",
    source_hint="Get them from https://nlp.stanford.edu/projects/nmt/ (IWSLT'15 English-Vietnamese: train.en, "
                "train.vi, tst2012.*, tst2013.*, vocab.*).",
))
