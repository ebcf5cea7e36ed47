"""Span extraction over retrieved passages (Quasar-T, SearchQA: CoDA Table 1)."""

from coda_exp.data.span.context import find_span, norm_token, tokens_with_space
from coda_exp.data.span.datamodule import SpanDataModule, collate_span
from coda_exp.data.span.readers import QuasarReader, SearchQAReader, SpanReader, get_span_reader

__all__ = ["QuasarReader", "SearchQAReader", "SpanDataModule", "SpanReader", "collate_span", "find_span",
           "get_span_reader", "norm_token", "tokens_with_space"]
