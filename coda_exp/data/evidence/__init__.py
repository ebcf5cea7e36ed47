"""Claims with evidence sentences: FEVER (claim files, the Wikipedia dump's store, TF-IDF retrieval)."""

from coda_exp.data.evidence.datamodule import EvidenceDataModule, collate_evidence
from coda_exp.data.evidence.readers import LABELS, ClaimReader, get_claim_reader
from coda_exp.data.evidence.retrieval import RetrievalOptions, TfidfRanker, retrieved_evidence
from coda_exp.data.evidence.wiki import WikiStore, open_store

__all__ = ["LABELS", "ClaimReader", "EvidenceDataModule", "RetrievalOptions", "TfidfRanker", "WikiStore",
           "collate_evidence", "get_claim_reader", "open_store", "retrieved_evidence"]
