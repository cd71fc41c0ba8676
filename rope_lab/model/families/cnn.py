"""A causal 1-D convolutional language model (`model.family: cnn`): no position encoding and no
attention, so its outputs are exactly shift-equivariant wherever its receptive field lies inside
the sequence (`rope_lab.model.cnn`).

Fields (`model.cnn.*`): `kernel_size` k and `dilations`, the cycle of dilations the layers take
in turn (layer l dilates by `dilations[l % len(dilations)]`). Depth, width, norm, MLP and
parametrisation are the shared `model.*` fields. Receptive field: R = 1 + sum over layers of
(k - 1) d_l tokens, the current one included.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_lab.model.families.base import FamilyConfig
from rope_lab.registry import MODELS
from rope_lab.roles import identity
from rope_lab.typed import ConfigError, check_positive


@MODELS.register("cnn")
@dataclass(frozen=True)
class CNNConfig(FamilyConfig):
    """Stacked causal dilated convolutions, each followed by the model's MLP, pre-norm residual
    blocks (`model.cnn.kernel_size`, `model.cnn.dilations`)."""

    kernel_size: int = identity(3)
    dilations: tuple[int, ...] = identity((1, 2, 4, 8))

    order = 1
    supports_scaling = False  # no rotary encoding for a scaling to act on
    decodes = False  # no cached decoder (a ring buffer per layer would be one)

    def build(self, model, vocab_size, *, train_length, max_length, key):
        """A `CNN` (`rope_lab.model.cnn.init_cnn`)."""
        from rope_lab.model.cnn import init_cnn  # deferred: imports JAX

        return init_cnn(model, vocab_size, train_length=train_length, key=key)

    def layer_dilations(self, depth: int) -> tuple[int, ...]:
        """The dilation of each of `depth` layers: the cycle `dilations`, repeated."""
        return tuple(self.dilations[i % len(self.dilations)] for i in range(depth))

    def receptive_field(self, model) -> int:
        """R = 1 + sum_l (k - 1) d_l over the model's `depth` layers."""
        return 1 + sum((self.kernel_size - 1) * d for d in self.layer_dilations(model.depth))

    def check(self, trial, path):
        """Kernel size and dilations >= 1; no position encoding, layout, heads or attention
        settings; no cached decoding, attention temperature or PoSE."""
        super().check(trial, path)
        check_positive(self.kernel_size, f"{path}.kernel_size")
        if not self.dilations:
            raise ConfigError(f"{path}.dilations: give at least one dilation")
        for i, d in enumerate(self.dilations):
            check_positive(d, f"{path}.dilations[{i}]")
        why = {
            "eval.decode.protocols": (bool(trial.eval.decode.protocols), "cached decoding"),
            "eval.zero_shot_temperature": (trial.eval.zero_shot_temperature, "attention"),
            "train.pose_target_length": (
                trial.train.pose_target_length is not None,
                "positions to shift (PoSE)",
            ),
        }
        for key, (set_, what) in why.items():
            if set_:
                raise ConfigError(f"{key}: model.family {self.name!r} has no {what}; unset it")

    def encoding_attributes(self, model):
        """No encoding: family 'none', nothing rotary, biased or learned, shift invariant."""
        return {
            "family": "none",
            "rotary": False,
            "additive_bias": False,
            "learned": False,
            "shift_invariant": True,
        }

    def slug(self) -> str:
        """'cnn-k3-d1.2.4.8'."""
        return f"cnn-k{self.kernel_size}-d{'.'.join(map(str, self.dilations))}"

    def label(self) -> str:
        """'CNN k3 d1,2,4,8'."""
        return f"CNN k{self.kernel_size} d{','.join(map(str, self.dilations))}"

    def cost(self, model, vocab_size, length):
        """Parameters: embedding V D, per layer a convolution k D^2 (a Linear over the k taps
        concatenated, no bias), the MLP c D M (c = 3 for SwiGLU or GeGLU, else 2) and two norms (2 D
        each for LayerNorm, D for RMSNorm), a final norm, the readout D V. Every weight but the
        embedding is a matmul weight applied once per position (the convolution's zero-padded
        taps included), so forward FLOPs = 2 x matmul weights x L, linear in L."""
        d, v = model.width, vocab_size
        norm = 2 * d if model.norm == "layernorm" else d
        mlp = (3 if model.gated_mlp else 2) * d * model.d_mlp
        matmul = model.depth * (self.kernel_size * d * d + mlp) + d * v
        n_params = v * d + matmul + model.depth * 2 * norm + norm
        return {
            "n_params": n_params,
            "n_params_non_embedding": n_params - 2 * v * d,
            "matmul_params": matmul,
            "forward_flops": 2 * matmul * length,
        }
