"""Language modelling on a prepared token corpus (``rope-lab corpus prepare``), read from disk
by memory mapping."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rope_lab.corpus.meta import open_split, read_meta, token_bytes
from rope_lab.registry import TASKS
from rope_lab.roles import identity
from rope_lab.tasks.base import Batch, Operands, Task, TaskParams, check_split
from rope_lab.tasks.windows import gather_windows, host_window_starts

if TYPE_CHECKING:
    import jax

# Above this many tokens `operands("train")` (a device copy of the whole split, for tests and
# small corpora) is refused; training never asks for it (`host_batch`).
DEVICE_COPY_TOKENS = 1 << 26


@TASKS.register("lm_tokens")
@dataclass(frozen=True)
class TokenLMParams(TaskParams):
    """The parameters of :class:`TokenLMTask` (see there)."""

    path: str = identity()
    display_name: ClassVar[str] = "token LM"

    def data_identity(self) -> str | None:
        """The corpus' fingerprint (`meta.json`): a folder prepared again from other text or
        with another tokenizer trains other models, under other trial ids."""
        return str(read_meta(self.path)["fingerprint"])

    order: ClassVar[int] = 6
    is_text: ClassVar[bool] = True
    default_metric: ClassVar[str] = "bits_per_byte"


@dataclass(frozen=True)
class TokenLMTask(TokenLMParams, Task):
    """Next-token prediction on the corpus folder ``path`` (``train.bin``, ``eval.bin``,
    ``meta.json``; :mod:`rope_lab.corpus`).

    ``vocab_size`` must equal the corpus' (``meta.json``). Training (``host_fed``) reads B
    windows of L + 1 tokens per step from a memory map of ``train.bin`` at starts that are a
    function of (seed, step) (:func:`rope_lab.tasks.windows.host_window_starts`), so the file
    is never read whole and a resumed run reads the windows it would have read. Evaluation and
    NTK probes read ``eval.bin`` (copied to the device once: the held-out text protocols read
    all of it) through the same windows as ``lm_text``. Every position is scored.
    """

    meta: dict[str, Any] = field(init=False, repr=False, compare=False)
    host_fed: ClassVar[bool] = True

    def _check_params(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise ValueError(f"lm_tokens: path must be a corpus folder, got path={self.path!r}")
        object.__setattr__(self, "path", os.fspath(self.path))
        meta = read_meta(self.path)
        if self.vocab_size > meta["vocab_size"]:  # smaller: "too small" (Task.__post_init__)
            raise ValueError(
                f"lm_tokens: task.vocab_size={self.vocab_size} but the corpus {self.path} has "
                f"vocab_size {meta['vocab_size']} (its meta.json); set task.vocab_size: "
                f"{meta['vocab_size']}"
            )
        for split in ("train", "eval"):
            open_split(self.path, split)  # checks the files' sizes against meta.json
        object.__setattr__(self, "meta", meta)

    def __getstate__(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "meta", read_meta(self.path))

    def min_vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def _vocab_explanation(self) -> str:
        return f"the vocabulary of the corpus {self.path}, its meta.json"

    def min_length(self) -> int:
        return 1

    def split_tokens(self, split: str) -> np.memmap:
        """The token ids of ``split`` (n,), memory-mapped read-only."""
        check_split(split)
        return open_split(self.path, split)

    def validate(self, length: int, split: str | None = "train") -> None:
        super().validate(length, split)
        if split is not None:
            size = int(self.meta[f"{split}_tokens"])
            if size < int(length) + 1:
                raise ValueError(
                    f"lm_tokens: the {split} split of {self.path} ({split}.bin) has {size} tokens, "
                    f"too short for length={length} (need length + 1 = {int(length) + 1} tokens)"
                )

    def operands(self, split: str = "train") -> Operands:
        """The split's tokens as one device array (cached per file): the eval split for
        evaluation and probes; the train split only up to ``DEVICE_COPY_TOKENS`` tokens
        (training gathers its windows on the host, :meth:`host_batch`)."""
        data = self.split_tokens(split)
        if split == "train" and data.size > DEVICE_COPY_TOKENS:
            raise ValueError(
                f"lm_tokens: the train split of {self.path} has {data.size} tokens, too many to "
                f"copy to the device (> {DEVICE_COPY_TOKENS}); training reads it by host_batch"
            )
        from rope_lab.tasks.sampling import on_device  # deferred: imports JAX

        st = os.stat(str(data.filename))
        key = ("lm_tokens", str(data.filename), st.st_ino, st.st_mtime_ns, split)
        return (on_device(key, lambda: np.asarray(data)),)

    def host_batch(
        self, batch_size: int, length: int, *, seed: int, step: int
    ) -> tuple[np.ndarray, ...]:
        """The (B, L + 1) int32 training windows of ``step`` from the memory-mapped train split:
        starts from (seed, step) only, each window read from the file alone."""
        data = self.split_tokens("train")
        starts = host_window_starts(seed, step, batch_size, data.size - length)
        return (gather_windows(data, starts, length),)

    def token_bytes(self) -> np.ndarray:
        """Bytes per token id (V,) from the corpus' tokenizer.json."""
        return token_bytes(self.path)

    def _sample(self, key: jax.Array, batch_size: int, length: int, operands: Operands) -> Batch:
        """The batch, drawn in JAX (`rope_lab.tasks.sampling.token_lm`)."""
        from rope_lab.tasks.sampling.token_lm import sample  # deferred: imports JAX

        return sample(self, key, batch_size, length, operands)
