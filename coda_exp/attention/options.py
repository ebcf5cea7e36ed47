"""CoDA's options in one validated object (Tay et al. 2019, §2 eqs. 1-6 and §3.4 eq. 10).

``CoDAOptions`` is what ``coda_matrix`` / ``coda_components``, ``CoDACrossAttention`` and ``CoDAScoring`` all use;
the modules take its fields as flat keyword arguments (so YAML keys stay flat: ``model.attention.center_e=true``,
``model.scoring.kernel=torch``) and build it once in their constructor. Defaults are those of the dataclass; a
module whose use needs another default says so in its docstring and in ``OPTION_DEFAULTS`` (a test checks that
every constructor default is the dataclass default unless listed there, and that the YAML equals the code).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import MappingProxyType

from coda_exp.attention.activations import E_FUNCTIONS, FUNCTION_RANGES, N_FUNCTIONS  # noqa: F401 (re-exported)
from coda_exp.attention.dispatch import KERNEL_CHOICES, configuration_error

CENTER_OVER = ("slice", "row")


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class CoDAOptions:
    """Options of M = f_E(E) * g * f_N(N) with E = a e_a e_b^T, N = -b ||n_a_i - n_b_j||_1 (eqs. 1-5, 10).

    e_fn: f_E, ``tanh`` | ``sigmoid``; n_fn: f_N, ``sigmoid`` | ``tanh`` | ``arctan`` | ``algebraic`` (Table 9).
    alpha, beta: temperatures of E and N (eqs. 1-2), finite and >= 0. scale: divide both by sqrt(d), d the feature
    size of e_a (eq. 10's 1/sqrt(dk); the paper asks alpha, beta <= 1 for large d). center_e / center_n: subtract
    the mean of E / N over the valid pairs before f_E / f_N (eqs. 6 / 4, Table 8). center_over: the axes of those
    means, ``slice`` (all valid pairs of each (..., la, lb) slice: the paper's Mean per example) or ``row`` (the
    valid keys of each query row: causal-safe). query_scale: multiply the query-side inputs (e_a and n_a) by
    1/sqrt(d) before both affinities, as Tensor2Tensor's ``multihead_attention`` scales q before its attention
    function; with ``scale=False`` that is the T2T reading of eq. 10: E = q k^T / sqrt(d) (eq. 10's E), but
    N = -||q / sqrt(d) - k||_1 (docs/transformer.md). gate_scale: g > 0; None = 2 for a sigmoid f_N without center_n
    (eq. 5: 2 sigmoid(N) in [0, 1] since N <= 0), else 1 (eq. 3 as printed: sigmoid(N'), Table 9's other f_N).
    kernel: ``auto`` or a registered kernel (``flash`` | ``fused`` | ``numba`` | ``chunked`` | ``torch``; ``flash``
    and ``fused`` do not centre);
    ``dispatch.select_kernel`` decides what runs, once per call.
    """

    e_fn: str = "tanh"
    n_fn: str = "sigmoid"
    alpha: float = 1.0
    beta: float = 1.0
    scale: bool = True
    center_e: bool = False
    center_n: bool = False
    center_over: str = "slice"
    query_scale: bool = False
    gate_scale: float | None = None
    kernel: str = "auto"

    def __post_init__(self):
        for name, allowed in (("e_fn", sorted(E_FUNCTIONS)), ("n_fn", sorted(N_FUNCTIONS)),
                              ("center_over", list(CENTER_OVER)), ("kernel", list(KERNEL_CHOICES))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"CoDA option {name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("scale", "center_e", "center_n", "query_scale"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(  # noqa: TRY004 (a config value)
                    f"CoDA option {name} must be True or False, got {getattr(self, name)!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not (_is_real(value) and value >= 0):
                raise ValueError(f"CoDA option {name} must be a finite float >= 0 (a temperature, eqs. 1-2), "
                                 f"got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.gate_scale is not None:
            if not (_is_real(self.gate_scale) and self.gate_scale > 0):
                raise ValueError(f"CoDA option gate_scale must be null or a finite float > 0 (1.0 = eq. 3, "
                                 f"2.0 = eq. 5), got {self.gate_scale!r}")
            object.__setattr__(self, "gate_scale", float(self.gate_scale))
        refused = configuration_error(self.kernel, self.center_e or self.center_n)
        if refused:
            raise ValueError(refused)

    @property
    def gate(self) -> float:
        """The gate scale g actually applied: ``gate_scale``, or when None 2 for an uncentred ``sigmoid`` f_N (eq. 5:
        2·sigmoid(N) for N <= 0 spans (0, 1]) and 1 otherwise (eq. 3; Table 9's other f_N as printed, f_E · f_N)."""
        if self.gate_scale is not None:
            return self.gate_scale
        return 2.0 if self.n_fn == "sigmoid" and not self.center_n else 1.0

    @property
    def centred(self) -> bool:
        """Whether E or N is mean-centred (the means need both matrices materialised)."""
        return self.center_e or self.center_n

    def temperatures(self, dim: int) -> tuple[float, float]:
        """(alpha, beta) as applied to features of size ``dim``: divided by sqrt(dim) when ``scale`` (eq. 10)."""
        inv = 1.0 / math.sqrt(dim) if self.scale and dim > 0 else 1.0
        return self.alpha * inv, self.beta * inv

    def query_factor(self, dim: int) -> float:
        """What the query-side inputs are multiplied by before the affinities: 1/sqrt(dim) with ``query_scale``."""
        return 1.0 / math.sqrt(dim) if self.query_scale and dim > 0 else 1.0

    def replace(self, **changes) -> CoDAOptions:
        """A validated copy with ``changes`` applied; unknown names are a ValueError listing the options."""
        unknown = sorted(set(changes) - set(OPTION_NAMES))
        if unknown:
            raise ValueError(f"unknown CoDA option(s) {unknown}; expected some of {list(OPTION_NAMES)}")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(CoDAOptions))
DEFAULTS = CoDAOptions()

# Where a module's defaults differ from ``CoDAOptions()``: the one table of them (each module's ``OPTION_DEFAULTS``
# is its row; a test checks constructors and YAML against it). Keyed by class name.
MODULE_OPTION_DEFAULTS = {
    "CoDAScoring": MappingProxyType({"center_over": "row"}),  # decoder-safe centring (docs/attention.md)
    "CoDACrossAttention": MappingProxyType({"gate_scale": 2.0}),  # DecompAtt's tables fix the gate at 2 f_N(N)
}


def option_defaults(target: str | None = None) -> dict:
    """``CoDAOptions()`` as a dict, updated with the declared differences of the module ``target`` names (a
    ``_target_`` such as ``coda_exp.attention.CoDAScoring``, or a class name); an unknown target: the dataclass's."""
    defaults = DEFAULTS.as_dict()
    if target:
        defaults.update(MODULE_OPTION_DEFAULTS.get(str(target).rpartition(".")[2], {}))
    return defaults
