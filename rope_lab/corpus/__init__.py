"""Tokenized corpora on disk: ``rope-lab corpus prepare`` writes them (:mod:`.prepare`), the
``lm_tokens`` task memory-maps them (:mod:`.meta`)."""

from rope_lab.corpus.meta import open_split, read_meta, token_bytes
from rope_lab.corpus.prepare import Prepared, prepare
from rope_lab.corpus.sources import CorpusError

__all__ = ["CorpusError", "Prepared", "open_split", "prepare", "read_meta", "token_bytes"]
