"""Recommendation models for the RM-SSD part: specs (the seed's Table III, NCF, Wide&Deep), fp32 weights,
their safetensors I/O, and a numpy reference forward pass.

Every model has one shape, the one the engine (crates/recsys) runs::

    dense (B, dense_width) ─ bottom MLP (ReLU after every layer; identity when it has no layers) ─┐
    pooled (B, tables, dim) ─ SparseLengthSum per table ───────────────────────────────────────── cat ─
        top MLP (ReLU between layers) ─ sigmoid → (B,)

with DLRM's ``cat`` interaction ``[bottom_out, pooled_0, …, pooled_{T-1}]`` (dense part first).

Table III, read as Facebook's DLRM benchmark reads its ``--arch-mlp-bot`` / ``--arch-mlp-top``
(facebookresearch/dlrm ``dlrm_s_pytorch.py`` and DeepRecSys' ``models/configs/dlrm_rm{1,2,3}.json``,
whose strings are Table III's verbatim, all with ``"arch_interaction_op": "cat"``): the bottom string
starts with the dense input width (``128-64-32``: input 128, layers of 64 and 32); the top string lists
the layers' *output* widths, the top input being prepended by the program as ``num_int`` =
(tables + 1)·dim for ``cat`` (``arch_mlp_top_adjusted = str(num_int) + "-" + arch_mlp_top``). So RMC1's
top is 288→256→64→1. The check against Table III's "MLP size": fp32 weights and biases of this reading
are 0.3846 / 1.2205 / 12.2277 MiB (2^20 bytes) for RMC1/2/3, which the paper prints as 0.39 / 1.23 /
12.23 "MB" — all three agree when the paper's MB is read as MiB and rounded *up* to two decimals
(rounded to nearest, RMC1 and RMC2 would read 0.38 and 1.22; in decimal MB they are 0.403 / 1.280 /
12.82, which does not fit). Weights alone (no biases) give 1.219 MiB for RMC2, so biases are counted.

NCF and Wide&Deep (the seed's §VI-C "More MLP-dominated models", one lookup per table) follow
DeepRecSys (Gupta et al., ISCA 2020; harvard-acc/DeepRecSys ``models/configs/ncf.json``,
``wide_and_deep.json``, ``models/ncf.py``, ``models/wide_and_deep.py``), the model zoo the seed cites:

* ``wnd``: DeepRecSys' Wide&Deep exactly — 512 dense features passed through unchanged (its
  ``arch_mlp_bot`` is the single number "512": no bottom layers), 27 tables of dim 32, ``cat`` with the
  dense features first, top MLP 1376→1024→512→256→1, sigmoid. DeepRecSys has no separate wide (linear)
  term: the raw dense features reach the deep MLP's first layer. Cheng et al.'s form with a linear wide
  part on the dense features, σ(deep + wᵀx + b), is :func:`fold_wide`: it is folded exactly into the same
  shape by carrying s = wᵀx + b through the hidden layers as the pair ReLU(s), ReLU(−s) (two more units
  per hidden layer) and adding ReLU(s) − ReLU(−s) = s to the logit.
* ``ncf``: no dense input, 4 tables of dim 64 (DeepRecSys: 2 for the MF/GMF branch, 2 for the MLP
  branch), MLP tower 256-256-128-64 (DeepRecSys' ``arch_mlp_top`` "256-256-128-64-64" without its final
  64-wide predictor) then a 1-wide output and sigmoid as NCF's paper predicts ŷ = σ(hᵀφ). The GMF branch
  does not fit the one shape (DeepRecSys sums the two MF vectors and concatenates the sum with the
  tower's output before its last layer; He et al. multiply them element-wise), so it is folded into the
  tower's input: all four pooled embeddings are concatenated, 256 wide (DeepRecSys' tower takes 128).
  MACs: 172,096 per sample against DeepRecSys' 147,456.

Weights are float32 numpy arrays keyed by facebookresearch/dlrm's tensor names (``dlrm_s_pytorch.py``,
``nn.Sequential`` with Linear at even and activations at odd positions, Linear weights (out, in)):
``bot_l.{2k}.weight|bias``, ``top_l.{2k}.weight|bias``, ``emb_l.{t}.weight`` (rows, dim). Files may
instead use TorchRec's DLRM names (``torchrec/models/dlrm.py``, ``torchrec/modules/mlp.py``):

* bottom layer k: ``dense_arch.model._mlp.{k}._linear.weight|bias`` (DenseArch.model is an MLP of
  Perceptrons, each holding ``_linear``);
* top layers but the last: ``over_arch.model.0._mlp.{k}._linear.weight|bias`` (OverArch.model is
  ``nn.Sequential(MLP(in, sizes[:-1]), nn.Linear(sizes[-2], sizes[-1]))``), the last:
  ``over_arch.model.1.weight|bias``;
* table t: ``sparse_arch.embedding_bag_collection.embedding_bags.<table name>.weight`` (the
  EmbeddingBagCollection's ModuleDict is keyed by ``EmbeddingBagConfig.name``, e.g. ``t_cat_0`` in
  TorchRec's DLRM example); a ``model.`` prefix (DLRMTrain's state dict) is accepted.

TorchRec's DLRM and dlrm_s_pytorch's default use the ``dot`` interaction, whose top input is
dim + C(T+1, 2) wide: such files load only as far as their names go and then fail the shape check
(the error says so); offload runs ``cat`` only.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = [
    "KINDS",
    "SPECS",
    "Model",
    "ModelError",
    "ModelSpec",
    "Names",
    "fold_wide",
    "pooled_sum",
    "split_first_top_layer",
    "tensor_names",
]

KINDS: tuple[str, ...] = ("dlrm", "ncf", "wnd")
Names = Literal["dlrm", "torchrec"]

META_SPEC = "offload.spec"
META_NAMES = "offload.names"
META_TABLE_NAMES = "offload.table_names"

_TR_BOT = "dense_arch.model._mlp.{k}._linear.{p}"
_TR_TOP = "over_arch.model.0._mlp.{k}._linear.{p}"
_TR_LAST = "over_arch.model.1.{p}"
_TR_EMB = "sparse_arch.embedding_bag_collection.embedding_bags.{name}.weight"


class ModelError(ValueError):
    """A spec is inconsistent, or a weights file is foreign, damaged, or disagrees with its spec."""


def _count(value: object, what: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ModelError(f"{what} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class ModelSpec:
    """A model's architecture. `bottom` and `top` list the layers' output widths (stored as tuples, so
    a spec is hashable); the bottom MLP's input is `dense_width`, the top MLP's is `top_input_width`."""

    name: str
    kind: str  # "dlrm" | "ncf" | "wnd"
    dense_width: int  # bottom MLP input; 0: no dense features
    bottom: Sequence[int]  # bottom layer outputs after the input, e.g. RMC1 (64, 32); () for none
    top: Sequence[int]  # top layer outputs after the (cat) input; the last is 1
    dim: int  # embedding dimension
    tables: int  # embedding tables
    lookups: int  # per table per sample (a workload figure; weights do not fix it)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name:
            raise ModelError(f"spec name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise ModelError(f"{self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for f in ("dense_width", "dim", "tables", "lookups"):
            set_(self, f, _count(getattr(self, f), f"{self.name}: {f}"))
        try:
            bottom = tuple(_count(w, f"{self.name}: bottom width") for w in self.bottom)
            top = tuple(_count(w, f"{self.name}: top width") for w in self.top)
        except TypeError:
            raise ModelError(f"{self.name}: bottom and top must be sequences of widths") from None
        set_(self, "bottom", bottom)
        set_(self, "top", top)
        if self.dense_width < 0:
            raise ModelError(f"{self.name}: dense_width {self.dense_width} < 0")
        for f in ("dim", "tables", "lookups"):
            if getattr(self, f) < 1:
                raise ModelError(f"{self.name}: {f} must be ≥ 1, got {getattr(self, f)}")
        if any(w < 1 for w in bottom + top):
            raise ModelError(f"{self.name}: layer widths must be ≥ 1 (bottom {bottom}, top {top})")
        if bottom and self.dense_width == 0:
            raise ModelError(f"{self.name}: a bottom MLP {bottom} needs dense inputs (dense_width is 0)")
        if not top or top[-1] != 1:
            raise ModelError(f"{self.name}: the top MLP must end in one output, got top {top}")
        if self.kind == "dlrm" and self.bottom_out != self.dim:
            raise ModelError(
                f"{self.name}: a DLRM's bottom MLP must output dim = {self.dim} values (its output joins "
                f"the embeddings), got {self.bottom_out}"
            )

    # ------------------------------------------------------------------------------------ derived
    @property
    def bottom_out(self) -> int:
        """Width of the bottom part of the `cat`: the last bottom layer, or the raw dense features."""
        return self.bottom[-1] if self.bottom else self.dense_width

    @property
    def top_input_width(self) -> int:
        """`cat` interaction width: bottom output + tables·dim (RMC1: 32 + 8·32 = 288)."""
        return self.bottom_out + self.tables * self.dim

    def layer_dims(self, part: Literal["bot", "top"]) -> list[tuple[int, int]]:
        """(out, in) of each Linear layer of the bottom or top MLP, in order."""
        inp, widths = (self.dense_width, self.bottom) if part == "bot" else (self.top_input_width, self.top)
        dims = []
        for w in widths:
            dims.append((w, inp))
            inp = w
        return dims

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """DLRM tensor name → shape of every MLP weight (out, in) and bias (out,), bottom first."""
        out: dict[str, tuple[int, ...]] = {}
        for prefix, part in (("bot_l", "bot"), ("top_l", "top")):
            for k, (o, i) in enumerate(self.layer_dims(part)):  # type: ignore[arg-type]
                out[f"{prefix}.{2 * k}.weight"] = (o, i)
                out[f"{prefix}.{2 * k}.bias"] = (o,)
        return out

    @property
    def mlp_params(self) -> int:
        """Weights and biases of both MLPs."""
        return sum(math.prod(s) for s in self.shapes().values())

    @property
    def mlp_bytes(self) -> int:
        """fp32 bytes of both MLPs (Table III's "MLP size" in MiB, see the module notes)."""
        return 4 * self.mlp_params

    @property
    def macs_per_sample(self) -> int:
        """Multiply-accumulates of both MLPs per sample (Σ out·in; SLS adds and biases excluded)."""
        return sum(o * i for part in ("bot", "top") for o, i in self.layer_dims(part))  # type: ignore[arg-type]

    @property
    def lookups_per_sample(self) -> int:
        """Embedding vectors read per sample: tables · lookups."""
        return self.tables * self.lookups

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bottom"], d["top"] = list(self.bottom), list(self.top)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ModelSpec:
        """The inverse of `to_dict`; a ModelError names what is missing or wrong."""
        fields = ("name", "kind", "dense_width", "bottom", "top", "dim", "tables", "lookups")
        if not isinstance(d, Mapping):
            raise ModelError(f"a model spec must be a JSON object, got {type(d).__name__}")
        missing = [f for f in fields if f not in d]
        extra = sorted(set(d) - set(fields))
        if missing or extra:
            raise ModelError(f"model spec: missing {missing}, unknown {extra}")
        return ModelSpec(**{f: d[f] for f in fields})


SPECS: dict[str, ModelSpec] = {
    # Table III (DeepRecSys' dlrm_rm{1,2,3}.json): dense input and bottom layers, top layer outputs.
    "rmc1": ModelSpec("rmc1", "dlrm", 128, (64, 32), (256, 64, 1), dim=32, tables=8, lookups=80),
    "rmc2": ModelSpec("rmc2", "dlrm", 256, (128, 64), (128, 64, 1), dim=64, tables=32, lookups=120),
    "rmc3": ModelSpec("rmc3", "dlrm", 2560, (1024, 256, 32), (512, 256, 1), dim=32, tables=10, lookups=20),
    # §VI-C's MLP-dominated models, one lookup per table, after DeepRecSys' ncf.json and
    # wide_and_deep.json (see the module notes for how NCF's GMF branch is folded in).
    "ncf": ModelSpec("ncf", "ncf", 0, (), (256, 256, 128, 64, 1), dim=64, tables=4, lookups=1),
    "wnd": ModelSpec("wnd", "wnd", 512, (), (1024, 512, 256, 1), dim=32, tables=27, lookups=1),
}


# ------------------------------------------------------------------------------------------ names
def _natural_key(s: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def default_table_names(tables: int) -> list[str]:
    """TorchRec table names offload writes: ``t_cat_{t}`` as TorchRec's DLRM example names them."""
    return [f"t_cat_{t}" for t in range(tables)]


def tensor_names(
    spec: ModelSpec, names: Names = "dlrm", table_names: Sequence[str] | None = None
) -> dict[str, str]:
    """DLRM tensor name → the name in convention `names`, for the MLPs and every table."""
    out: dict[str, str] = {}
    nb, nt = len(spec.bottom), len(spec.top)
    tnames = list(table_names) if table_names is not None else default_table_names(spec.tables)
    if len(tnames) != spec.tables or len(set(tnames)) != len(tnames):
        raise ModelError(f"{spec.name}: need {spec.tables} distinct table names, got {tnames}")
    for p in ("weight", "bias"):
        for k in range(nb):
            out[f"bot_l.{2 * k}.{p}"] = f"bot_l.{2 * k}.{p}" if names == "dlrm" else _TR_BOT.format(k=k, p=p)
        for k in range(nt):
            if names == "dlrm":
                out[f"top_l.{2 * k}.{p}"] = f"top_l.{2 * k}.{p}"
            elif k < nt - 1:
                out[f"top_l.{2 * k}.{p}"] = _TR_TOP.format(k=k, p=p)
            else:
                out[f"top_l.{2 * k}.{p}"] = _TR_LAST.format(p=p)
    for t in range(spec.tables):
        out[f"emb_l.{t}.weight"] = f"emb_l.{t}.weight" if names == "dlrm" else _TR_EMB.format(name=tnames[t])
    return out


_DLRM_RE = re.compile(r"(bot_l|top_l)\.(\d+)\.(weight|bias)|emb_l\.(\d+)\.weight")
_TR_BOT_RE = re.compile(r"dense_arch\.model\._mlp\.(\d+)\._linear\.(weight|bias)")
_TR_TOP_RE = re.compile(r"over_arch\.model\.0\._mlp\.(\d+)\._linear\.(weight|bias)")
_TR_LAST_RE = re.compile(r"over_arch\.model\.1\.(weight|bias)")
_TR_EMB_RE = re.compile(r"sparse_arch\.embedding_bag_collection\.embedding_bags\.(.+)\.weight")


def _detect(keys: Sequence[str], where: str) -> tuple[Names, str]:
    """The naming convention of a file's keys and a prefix to strip."""
    tr_heads = ("dense_arch.", "over_arch.", "sparse_arch.")
    prefix = "model." if keys and all(k.startswith("model.") for k in keys) else ""
    stripped = [k[len(prefix) :] for k in keys]
    has_tr = any(k.startswith(tr_heads) for k in stripped)
    has_dlrm = any(k.startswith(("bot_l.", "top_l.", "emb_l.")) for k in keys)
    if has_tr and not has_dlrm:
        return "torchrec", prefix
    if has_dlrm and not has_tr:
        return "dlrm", ""
    shown = ", ".join(sorted(keys)[:6]) + (" …" if len(keys) > 6 else "")
    raise ModelError(
        f"{where}not a DLRM model: expected facebookresearch/dlrm names (bot_l.0.weight, top_l.0.weight, "
        f"emb_l.0.weight) or TorchRec's (dense_arch.…, over_arch.…, sparse_arch.…); "
        f"found {shown or 'no tensors'}"
    )


def _canonical(
    keys: Sequence[str], names: Names, prefix: str, table_order: Sequence[str] | None, where: str
) -> dict[str, str]:
    """File key → DLRM name; raises on keys that belong to neither an MLP nor a table."""
    out: dict[str, str] = {}
    if names == "dlrm":
        for k in keys:
            m = _DLRM_RE.fullmatch(k)
            if not m:
                raise ModelError(f"{where}{k}: unexpected tensor in a DLRM model file")
            if m.group(1) and int(m.group(2)) % 2:
                raise ModelError(
                    f"{where}{k}: DLRM keeps Linear layers at even positions of its nn.Sequential "
                    "(activations at odd ones); this is not a DLRM MLP"
                )
            out[k] = k
        return out
    top_k: list[int] = []
    embs: dict[str, str] = {}
    for key in keys:
        k = key[len(prefix) :]
        if m := _TR_BOT_RE.fullmatch(k):
            out[key] = f"bot_l.{2 * int(m.group(1))}.{m.group(2)}"
        elif m := _TR_TOP_RE.fullmatch(k):
            top_k.append(int(m.group(1)))
            out[key] = f"top_l.{2 * int(m.group(1))}.{m.group(2)}"
        elif _TR_LAST_RE.fullmatch(k):
            pass  # numbered once the top MLP's depth is known
        elif m := _TR_EMB_RE.fullmatch(k):
            embs[m.group(1)] = key
        else:
            raise ModelError(f"{where}{key}: unexpected tensor in a TorchRec DLRM file")
    last = 2 * (max(top_k) + 1) if top_k else 0
    for key in keys:
        if m := _TR_LAST_RE.fullmatch(key[len(prefix) :]):
            out[key] = f"top_l.{last}.{m.group(1)}"
    if table_order is not None and embs:  # a file saved without its tables keeps their names
        if sorted(table_order) != sorted(embs):
            raise ModelError(f"{where}tables {sorted(embs)} disagree with the metadata's {list(table_order)}")
        order = list(table_order)
    else:
        order = sorted(embs, key=_natural_key)
    for t, name in enumerate(order):
        out[embs[name]] = f"emb_l.{t}.weight"
    return out


# ------------------------------------------------------------------------------------ validation
def _layers_present(keys: Iterable[str], prefix: str) -> list[int]:
    return sorted(int(m.group(1)) for k in keys if (m := re.fullmatch(rf"{prefix}\.(\d+)\.weight", k)))


def _infer_spec(
    shapes: Mapping[str, tuple[int, ...]], name: str, shown: Mapping[str, str], where: str
) -> ModelSpec:
    """A spec from the tensors' shapes alone (a foreign file without offload metadata). Tables give
    dim and count; without them a DLRM's bottom output gives dim. `lookups` is unknown: 1."""

    def dims(prefix: str, step: int, what: str) -> list[tuple[int, ...]]:
        ks = _layers_present(shapes, prefix)
        if ks != list(range(0, step * len(ks), step)):
            want = "0, 2, 4, …" if step == 2 else "0, 1, 2, …"
            raise ModelError(f"{where}{prefix}: {what} at positions {ks}, expected {want}")
        for k in ks:
            if len(shapes[f"{prefix}.{k}.weight"]) != 2:
                found = shapes[f"{prefix}.{k}.weight"]
                raise ModelError(
                    f"{where}{shown[f'{prefix}.{k}.weight']}: expected a 2-d array, found {found}"
                )
        return [shapes[f"{prefix}.{k}.weight"] for k in ks]

    bot, top = dims("bot_l", 2, "Linear layers"), dims("top_l", 2, "Linear layers")
    embs = dims("emb_l", 1, "tables")
    if not top:
        raise ModelError(f"{where}no top MLP (top_l.0.weight or over_arch.…) in the file")
    bottom = [s[0] for s in bot]
    top_in = top[0][1]
    if embs:
        tables, dim = len(embs), int(embs[0][1])
        dense_width = bot[0][1] if bot else top_in - tables * dim
        if dense_width < 0:
            raise ModelError(
                f"{where}the top MLP takes {top_in} inputs, fewer than {tables} tables × dim {dim}; "
                "pass a spec"
            )
    elif bot:
        dense_width, dim = bot[0][1], bottom[-1]
        rest = top_in - dim
        if rest <= 0 or rest % dim:
            raise ModelError(
                f"{where}cannot infer the tables: the top MLP takes {top_in} inputs, not bottom output {dim} "
                f"+ a whole number of {dim}-wide tables (a `dot` interaction?); pass a spec"
            )
        tables = rest // dim
    else:
        raise ModelError(
            f"{where}no bottom MLP and no tables in the file: cannot infer the model; pass a spec"
        )
    bottom_out = bottom[-1] if bottom else dense_width
    kind = "dlrm" if bottom and bottom_out == dim else ("ncf" if dense_width == 0 else "wnd")
    try:
        return ModelSpec(name, kind, dense_width, bottom, [s[0] for s in top], dim, tables, lookups=1)
    except ModelError as e:
        raise ModelError(f"{where}{e}") from None


def _dot_widths(spec: ModelSpec) -> set[int]:
    f = spec.tables + 1
    return {spec.bottom_out + f * (f - 1) // 2, spec.bottom_out + f * (f + 1) // 2}


def _check_weights(
    spec: ModelSpec,
    weights: Mapping[str, np.ndarray],
    where: str = "",
    shown: Mapping[str, str] | None = None,
) -> None:
    """Raises ModelError naming the first tensor that is missing, extra, not fp32, misshapen or
    holding a NaN or infinite MLP weight (named with its position)."""
    shown = shown or {}

    def nm(k: str) -> str:
        return shown.get(k, k)

    for name, shape in spec.shapes().items():
        if name not in weights:
            raise ModelError(f"{where}{nm(name)}: missing (a {spec.name} model needs shape {shape})")
        a = weights[name]
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            dt = getattr(a, "dtype", type(a).__name__)
            raise ModelError(f"{where}{nm(name)}: dtype {dt}, expected float32")
        if tuple(a.shape) != shape:
            msg = f"{where}{nm(name)}: expected {shape}, found {tuple(a.shape)}"
            if name == "top_l.0.weight" and a.ndim == 2 and a.shape[1] != shape[1]:
                msg += (
                    f" — the top MLP's input is cat(bottom output {spec.bottom_out}, "
                    f"{spec.tables} tables × dim {spec.dim}) = {spec.top_input_width}"
                )
                if a.shape[1] in _dot_widths(spec):
                    msg += f"; {a.shape[1]} is DLRM's `dot` interaction width, offload runs `cat` only"
            raise ModelError(msg)
        if not np.isfinite(a).all():  # a NaN weight makes every prediction NaN, an inf one 0 or 1
            at = tuple(int(x) for x in np.argwhere(~np.isfinite(a))[0])
            raise ModelError(f"{where}{nm(name)}{list(at)} is {a[at]}; weights must be finite numbers")
    present = [t for t in range(spec.tables) if f"emb_l.{t}.weight" in weights]
    if present and len(present) != spec.tables:
        gone = next(t for t in range(spec.tables) if t not in present)
        raise ModelError(
            f"{where}{nm(f'emb_l.{gone}.weight')}: missing; tables are all in the file or none "
            f"({len(present)} of {spec.tables} found)"
        )
    for t in present:
        name = f"emb_l.{t}.weight"
        a = weights[name]
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            raise ModelError(
                f"{where}{nm(name)}: dtype {getattr(a, 'dtype', type(a).__name__)}, expected float32"
            )
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != spec.dim:
            raise ModelError(f"{where}{nm(name)}: expected (rows ≥ 1, {spec.dim}), found {tuple(a.shape)}")
    allowed = set(spec.shapes()) | {f"emb_l.{t}.weight" for t in range(spec.tables)}
    for name in sorted(weights, key=_natural_key):
        if name not in allowed:
            raise ModelError(
                f"{where}{nm(name)}: unexpected tensor; not part of {spec.name} ({_describe(spec)})"
            )


def _describe(spec: ModelSpec) -> str:
    bot = "-".join(map(str, (spec.dense_width, *spec.bottom))) if spec.bottom else f"dense {spec.dense_width}"
    top = "-".join(map(str, (spec.top_input_width, *spec.top)))
    return f"bottom {bot}, top {top}, {spec.tables} tables × dim {spec.dim}"


# ------------------------------------------------------------------------------------------ model
@dataclass(eq=False)
class Model:
    """A spec and its float32 weights under DLRM names: the MLPs (always) and the embedding tables
    ``emb_l.{t}.weight`` (rows, dim) — all tables or none (big tables live in table files)."""

    spec: ModelSpec
    weights: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        _check_weights(self.spec, self.weights)

    # ----------------------------------------------------------------------------------- make
    @staticmethod
    def random(
        spec: ModelSpec, rows: Sequence[int] | None = None, seed: int = 0, *, with_tables: bool = True
    ) -> Model:
        """facebookresearch/dlrm's initialisation: Linear weights N(0, √(2/(in+out))), biases
        N(0, √(1/out)); tables (when `rows` is given and `with_tables`) U(−√(1/rows), √(1/rows)).
        The MLPs are drawn first, so they do not depend on the tables."""
        rng = np.random.default_rng(seed)
        w: dict[str, np.ndarray] = {}
        for name, shape in spec.shapes().items():
            std = math.sqrt(2.0 / (shape[0] + shape[1])) if len(shape) == 2 else math.sqrt(1.0 / shape[0])
            w[name] = rng.normal(0.0, std, size=shape).astype(np.float32)
        if rows is not None and with_tables:
            if len(rows) != spec.tables:
                raise ModelError(f"{spec.name}: {len(rows)} row counts for {spec.tables} tables")
            for t, n in enumerate(rows):
                if _count(n, f"table {t} rows") < 1:
                    raise ModelError(f"{spec.name}: table {t} has {n} rows")
                b = math.sqrt(1.0 / n)
                w[f"emb_l.{t}.weight"] = rng.uniform(-b, b, size=(int(n), spec.dim)).astype(np.float32)
        return Model(spec, w)

    # ----------------------------------------------------------------------------------- parts
    def layers(self, part: Literal["bot", "top"]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight (out, in), bias (out,)) of each layer of the bottom or top MLP."""
        prefix = "bot_l" if part == "bot" else "top_l"
        n = len(self.spec.bottom if part == "bot" else self.spec.top)
        return [
            (self.weights[f"{prefix}.{2 * k}.weight"], self.weights[f"{prefix}.{2 * k}.bias"])
            for k in range(n)
        ]

    def embedding_tables(self) -> list[np.ndarray] | None:
        """The in-memory tables (rows, dim), or None when the model holds none."""
        if "emb_l.0.weight" not in self.weights:
            return None
        return [self.weights[f"emb_l.{t}.weight"] for t in range(self.spec.tables)]

    # ----------------------------------------------------------------------------------- compute
    def forward(self, dense: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        """Predictions (B,) float32 from dense features (B, dense_width) and pooled embeddings
        (B, tables, dim) (or (B, tables·dim)): bottom MLP with ReLU after every layer, `cat`
        [bottom_out, pooled_0, …], top MLP with ReLU between layers, sigmoid."""
        s = self.spec
        dense = np.asarray(dense, dtype=np.float32)
        pooled = np.asarray(pooled, dtype=np.float32)
        if dense.ndim != 2 or dense.shape[1] != s.dense_width:
            raise ValueError(f"dense must be (batch, {s.dense_width}), got shape {dense.shape}")
        b = dense.shape[0]
        if pooled.shape not in ((b, s.tables, s.dim), (b, s.tables * s.dim)):
            raise ValueError(
                f"pooled must be ({b}, {s.tables}, {s.dim}) for a batch of {b}, got {pooled.shape}"
            )
        x = dense
        for w, bias in self.layers("bot"):
            x = x @ w.T
            x += bias
            np.maximum(x, 0.0, out=x)
        z = np.concatenate([x, pooled.reshape(b, s.tables * s.dim)], axis=1)
        top = self.layers("top")
        for i, (w, bias) in enumerate(top):
            z = z @ w.T
            z += bias
            if i + 1 < len(top):
                np.maximum(z, 0.0, out=z)
        return _sigmoid(z[:, 0])

    def pool(self, offsets: Sequence[np.ndarray], indices: Sequence[np.ndarray]) -> np.ndarray:
        """(B, tables, dim) pooled sums from the in-memory tables; per table, offsets (B + 1) and
        indices as PyTorch's EmbeddingBag (include_last_offset) takes them."""
        tabs = self.embedding_tables()
        if tabs is None:
            raise ModelError(
                f"{self.spec.name}: the model holds no embedding tables (they live in table files)"
            )
        if len(offsets) != self.spec.tables or len(indices) != self.spec.tables:
            raise ValueError(
                f"need offsets and indices for {self.spec.tables} tables, got {len(offsets)}, {len(indices)}"
            )
        sums = [
            pooled_sum(tab, o, i, table_id=t)
            for t, (tab, o, i) in enumerate(zip(tabs, offsets, indices, strict=True))
        ]
        if len({p.shape[0] for p in sums}) > 1:
            raise ValueError(f"tables disagree on the batch size: {[p.shape[0] for p in sums]}")
        return np.stack(sums, axis=1)

    def predict(
        self, dense: np.ndarray, offsets: Sequence[np.ndarray], indices: Sequence[np.ndarray]
    ) -> np.ndarray:
        """`forward(dense, pool(offsets, indices))`."""
        return self.forward(dense, self.pool(offsets, indices))

    # ----------------------------------------------------------------------------------- files
    def save(
        self,
        path: Path | str,
        names: Names = "dlrm",
        *,
        tables: bool = True,
        table_names: Sequence[str] | None = None,
    ) -> None:
        """Writes a safetensors file (atomically) with DLRM's or TorchRec's tensor names and the spec
        (JSON) in the metadata; `tables=False` leaves the embedding tables out."""
        if names not in ("dlrm", "torchrec"):
            raise ValueError(f"names must be 'dlrm' or 'torchrec', got {names!r}")
        if names == "torchrec" and len(self.spec.top) < 2:
            raise ModelError(f"{self.spec.name}: TorchRec's OverArch needs at least two top layers")
        from safetensors.numpy import save

        tnames = list(table_names) if table_names is not None else default_table_names(self.spec.tables)
        mapping = tensor_names(self.spec, names, tnames)
        keep = {k: v for k, v in self.weights.items() if tables or not k.startswith("emb_l.")}
        data = {mapping[k]: np.ascontiguousarray(v, dtype=np.float32) for k, v in keep.items()}
        meta = {META_SPEC: json.dumps(self.spec.to_dict()), META_NAMES: names}
        if names == "torchrec":
            meta[META_TABLE_NAMES] = json.dumps(tnames)
        from offload.files import write_bytes

        write_bytes(Path(path), save(data, metadata=meta))  # temp + fsync + rename

    @staticmethod
    def load(
        path: Path | str, spec: ModelSpec | None = None, *, names: Names | None = None, tables: bool = True
    ) -> Model:
        """Reads a safetensors file with DLRM's or TorchRec's names (detected unless `names` says).
        The spec comes from `spec`, else the file's metadata, else the shapes (a foreign file; then
        `lookups` is 1). `tables=False` skips the embedding tables. Every disagreement is a
        ModelError naming the tensor; a missing file is FileNotFoundError."""
        from safetensors import safe_open

        where = f"{path}: "
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such model file")
        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = dict(f.metadata() or {})
                keys = list(f.keys())
                conv, prefix = (names, "model." if names == "torchrec" and _all_prefixed(keys) else "")
                if conv is None:
                    conv, prefix = _detect(keys, where)
                order = _json(meta, META_TABLE_NAMES, where) if conv == "torchrec" else None
                if order is not None and not (
                    isinstance(order, list) and all(isinstance(n, str) for n in order)
                ):
                    raise ModelError(f"{where}metadata {META_TABLE_NAMES!r} is not a list of table names")
                canon = _canonical(keys, conv, prefix, order, where)
                shapes: dict[str, tuple[int, ...]] = {}
                for k in keys:
                    sl = f.get_slice(k)
                    if sl.get_dtype() != "F32":
                        raise ModelError(f"{where}{k}: dtype {sl.get_dtype()}, expected F32 (float32)")
                    shapes[canon[k]] = tuple(int(d) for d in sl.get_shape())
                weights = {
                    canon[k]: f.get_tensor(k) for k in keys if tables or not canon[k].startswith("emb_l.")
                }
        except (ModelError, FileNotFoundError):
            raise
        except Exception as e:  # safetensors' own errors: truncated, not safetensors, bad dtype …
            raise ModelError(f"{where}not a readable safetensors model ({type(e).__name__}: {e})") from None
        shown = {v: k for k, v in canon.items()}
        if spec is None:
            if META_SPEC in meta:
                d = _json(meta, META_SPEC, where)
                try:
                    spec = ModelSpec.from_dict(d)
                except (ModelError, TypeError) as e:
                    raise ModelError(f"{where}bad spec in the metadata: {e}") from None
            else:
                spec = _infer_spec(shapes, Path(path).stem, shown, where)
        try:  # name what is missing as the file's convention would
            expected = tensor_names(spec, conv, order if order and len(order) == spec.tables else None)
            shown = {**{k: prefix + v for k, v in expected.items()}, **shown}
        except ModelError:
            pass
        _check_weights(spec, weights, where, shown)
        return Model(spec, weights)


def _all_prefixed(keys: Sequence[str]) -> bool:
    return bool(keys) and all(k.startswith("model.") for k in keys)


def _json(meta: Mapping[str, str], key: str, where: str) -> Any:
    if key not in meta:
        return None
    try:
        return json.loads(meta[key])
    except json.JSONDecodeError as e:
        raise ModelError(f"{where}metadata {key!r} is not JSON ({e})") from None


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^−z) in float32 without overflow warnings."""
    z = np.asarray(z, dtype=np.float32)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32)


# ------------------------------------------------------------------------------------------- ops
def pooled_sum(
    table: np.ndarray,
    offsets: np.ndarray | Sequence[int],
    indices: np.ndarray | Sequence[int],
    *,
    table_id: int | None = None,
) -> np.ndarray:
    """SparseLengthSum of one table: (B, dim) float32, row b = Σ table[indices[offsets[b]:offsets[b+1]]].
    Empty bags sum to zeros; repeated indices count each time. `offsets` has B + 1 entries, starts at
    0, never decreases and ends at len(indices); indices lie in [0, rows). A ValueError names the
    table (`table_id`) and the position that breaks this."""
    at = f"table {table_id}: " if table_id is not None else ""
    table = np.asarray(table)
    if table.ndim != 2:
        raise ValueError(f"{at}a table is (rows, dim), got shape {table.shape}")
    offs = np.asarray(offsets)
    idx = np.asarray(indices)
    for what, a in (("offsets", offs), ("indices", idx)):
        if a.ndim != 1:
            raise ValueError(f"{at}{what} must be one-dimensional, got shape {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{at}{what} must be integers, got dtype {a.dtype}")
    offs = offs.astype(np.int64, copy=False)
    idx = idx.astype(np.int64, copy=False)
    if offs.size == 0:
        raise ValueError(f"{at}offsets is empty; a batch of B bags needs B + 1 offsets starting at 0")
    if offs[0] != 0:
        raise ValueError(f"{at}offsets[0] = {offs[0]}, must be 0")
    step = np.diff(offs)
    if (step < 0).any():
        p = int(np.argmax(step < 0)) + 1
        raise ValueError(
            f"{at}offsets[{p}] = {offs[p]} < offsets[{p - 1}] = {offs[p - 1]}: offsets must not decrease"
        )
    if offs[-1] != idx.size:
        raise ValueError(f"{at}offsets[-1] = {offs[-1]}, must equal the number of indices ({idx.size})")
    rows, dim = table.shape
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        p = int(np.argmax(bad))
        raise ValueError(f"{at}indices[{p}] = {idx[p]} is outside the table's rows [0, {rows})")
    out = np.zeros((offs.size - 1, dim), dtype=np.float32)
    if idx.size:
        full = step > 0
        gathered = np.asarray(table[idx], dtype=np.float32)
        out[full] = np.add.reduceat(gathered, offs[:-1][full], axis=0)
    return out


def split_first_top_layer(model: Model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RM-SSD's intra-layer decomposition (§IV-C2) of the first top layer: its weight W (out, in)
    split by columns into W_b (out, bottom_out) and W_e (out, tables·dim), with the bias, so that
    W·cat(b, e) + bias = W_b·b + W_e·e + bias: the bottom MLP and the embedding lookups can each
    feed their half while the other is still running."""
    w, bias = model.layers("top")[0]
    k = model.spec.bottom_out
    return np.ascontiguousarray(w[:, :k]), np.ascontiguousarray(w[:, k:]), bias.copy()


def fold_wide(model: Model, weight: np.ndarray, bias: float = 0.0) -> Model:
    """Wide&Deep with Cheng et al.'s linear wide part on the dense features, folded exactly into the
    one model shape: the result's forward is σ(deep logit + weight·dense + bias). Needs a model
    whose dense features reach the top MLP unchanged (no bottom layers, dense_width > 0).

    With s = weight·dense + bias: a single top layer takes s directly (weight added to its dense
    columns); otherwise the first top layer gains the rows ±[weight, 0…] (biases ±bias), every further
    hidden layer passes both units on (weight 1; ReLU of a non-negative value is itself) and the
    output layer adds ReLU(s) − ReLU(−s) = s. Hidden widths grow by 2."""
    s = model.spec
    if s.bottom or s.dense_width == 0:
        raise ModelError(
            f"{s.name}: fold_wide needs the raw dense features in the top MLP's input (no bottom layers)"
        )
    wv = np.asarray(weight, dtype=np.float32)
    if wv.shape != (s.dense_width,):
        raise ModelError(f"wide weight: expected ({s.dense_width},), found {wv.shape}")
    w = dict(model.weights)
    top = model.layers("top")
    n = len(top)
    if n == 1:
        w0, b0 = top[0][0].copy(), top[0][1].copy()
        w0[0, : s.dense_width] += wv
        b0[0] += np.float32(bias)
        w["top_l.0.weight"], w["top_l.0.bias"] = w0, b0
        return Model(replace(s, name=f"{s.name}+wide"), w)
    for i, (wi, bi) in enumerate(top):
        o, k = wi.shape
        if i == 0:
            extra = np.zeros((2, k), dtype=np.float32)
            extra[0, : s.dense_width], extra[1, : s.dense_width] = wv, -wv
            nw = np.vstack([wi, extra])
            nb = np.concatenate([bi, np.array([bias, -bias], dtype=np.float32)])
        elif i < n - 1:
            nw = np.zeros((o + 2, k + 2), dtype=np.float32)
            nw[:o, :k] = wi
            nw[o, k] = nw[o + 1, k + 1] = 1.0
            nb = np.concatenate([bi, np.zeros(2, dtype=np.float32)])
        else:
            nw = np.hstack([wi, np.array([[1.0, -1.0]], dtype=np.float32)])
            nb = bi.copy()
        w[f"top_l.{2 * i}.weight"], w[f"top_l.{2 * i}.bias"] = nw, nb
    widths = [t + 2 for t in s.top[:-1]] + [1]
    return Model(replace(s, name=f"{s.name}+wide", top=widths), w)
