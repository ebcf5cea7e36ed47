"""The special token ids every tokenizer of the project shares, and :func:`strip_special`: the content of decoded ids.

A leaf module: the data layer (vocabularies, tokenizers), the models (decoding) and the tasks (scoring) all read it,
none of them through another layer. ``pad = 0``, ``bos = 1``, ``eos = 2``, ``unk = 3``; words follow from id 4 on.
"""

from __future__ import annotations

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # at ids 0, 1, 2, 3


def strip_special(ids, eos_id: int = EOS_ID, pad_id: int = PAD_ID, bos_id: int | None = BOS_ID):
    """The content of decoded ids: each row up to (not including) its first ``eos``, without ``pad``/``bos``.

    ``ids``: one row (a list of ints or a 1-D tensor) -> ``list[int]``; a batch (a 2-D tensor or a list of rows)
    -> ``list[list[int]]``.
    """
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], (list, tuple)):
        return [strip_special(row, eos_id, pad_id, bos_id) for row in ids]
    out: list[int] = []
    for i in ids:
        i = int(i)
        if i == eos_id:
            break
        if i != pad_id and i != bos_id:
            out.append(i)
    return out
