"""What the word-list tasks share (``cwe``, ``fwe``; RULER's aggregation tasks): the
vocabulary, the answer (the most frequent words, as Python's ``Counter.most_common``) and the
sequence layout. This module is the vocabulary; the answer and the layout in JAX are
`tasks/sampling/words.py`."""

from __future__ import annotations

QUERY = 0
WORD_START = 1


class WordVocabulary:
    """The vocabulary of a word-list task with a ``word_vocab`` field: 0 QUERY, then the words
    [WORD_START, WORD_START + word_vocab)."""

    word_vocab: int

    def min_vocab_size(self) -> int:
        """Token ids the task uses: QUERY and the words."""
        return WORD_START + self.word_vocab

    def _vocab_explanation(self) -> str:
        return f"QUERY + word_vocab={self.word_vocab} words"
