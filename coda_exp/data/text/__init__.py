"""Single texts with a class label: IMDb and SST (sentiment)."""

from coda_exp.data.text.datamodule import TextClassificationDataModule
from coda_exp.data.text.readers import TEXT_READERS, TextReader, get_text_reader

__all__ = ["TEXT_READERS", "TextClassificationDataModule", "TextReader", "get_text_reader"]
