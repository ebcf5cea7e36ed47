"""Single texts with a class label: IMDb and SST (sentiment, CoDA Table 5), Yelp (stars, AttConv Table 3)."""

from coda_exp.data.text.datamodule import TextClassificationDataModule
from coda_exp.data.text.readers import TextReader, get_text_reader
from coda_exp.data.text.yelp import YelpReader

__all__ = ["TextClassificationDataModule", "TextReader", "YelpReader", "get_text_reader"]
