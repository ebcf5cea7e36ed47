"""Single texts with a class label: IMDb and SST (sentiment)."""

from coda_exp.data.text.datamodule import TextClassificationDataModule
from coda_exp.data.text.readers import TextReader, get_text_reader

__all__ = ["TextClassificationDataModule", "TextReader", "get_text_reader"]
