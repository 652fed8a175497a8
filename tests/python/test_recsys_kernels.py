"""Tests for the RM-SSD kernel-size search and FPGA resource model (offload.recsys.fpga).

Layer interpretation (see the module docstring): Table III's top widths are the *outputs* of the
top layers (DLRM prepends the interaction width), so with ``cat`` interaction L_0 is
``(tables + 1) * dim x top[0]``; intra-layer decomposition splits it into L_b (``bottom[-1] x
top[0]``) and L_e (``tables * dim x top[0]``); the remaining top layers are L_t1, L_t2. That gives
Table V's columns L_b0 L_b1 L_b2 L_b L_e L_t1 L_t2 and Table III's MLP sizes.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from offload.cli import app
from offload.recsys import fpga as K

RMC1, RMC2, RMC3 = K.TABLE_III["RMC1"], K.TABLE_III["RMC2"], K.TABLE_III["RMC3"]


# ------------------------------------------------------------------------------------ shapes, flash


def test_layer_shapes_follow_the_decomposition() -> None:
    shapes = {s.name: (s.rows, s.cols) for s in K.layer_shapes(RMC1)}
    assert shapes == {
        "L_b0": (128, 64),
        "L_b1": (64, 32),
        "L_b": (32, 256),
        "L_e": (256, 256),
        "L_t1": (256, 64),
        "L_t2": (64, 1),
    }
    shapes3 = [(s.name, s.rows, s.cols) for s in K.layer_shapes(RMC3)]
    assert shapes3 == [
        ("L_b0", 2560, 1024),
        ("L_b1", 1024, 256),
        ("L_b2", 256, 32),
        ("L_b", 32, 512),
        ("L_e", 320, 512),
        ("L_t1", 512, 256),
        ("L_t2", 256, 1),
    ]
    assert [s.name for s in K.naive_shapes(RMC1)] == ["L_b0", "L_b1", "L_0", "L_t1", "L_t2"]
    assert K.naive_shapes(RMC1)[2].rows == (8 + 1) * 32
    assert K.last_layers(RMC1) == {"L_t2"}


def test_mlp_sizes_match_table_iii() -> None:
    # Table III "MLP size": 0.39 / 1.23 / 12.23 MB; ours (fp32 weights + biases, MiB) agree to 0.01.
    for model, paper in ((RMC1, 0.39), (RMC2, 1.23), (RMC3, 12.23)):
        assert model.mlp_bytes / 2**20 == pytest.approx(paper, abs=0.01)


def test_flash_model_matches_table_ii() -> None:
    flash = K.FlashModel()
    for ev in (64, 128, 256, 512):
        assert flash.ev_read_cycles(ev) == math.ceil(Fraction(60 * 20 * ev, 4096) + 2800)
        assert abs(flash.ev_read_cycles(ev) - (0.293 * ev + 2800)) <= 1  # Table II's C_EV
    assert flash.ev_read_cycles(128) == 2838
    assert flash.b_ev(128) == Fraction(4, 2838)
    # 8 tables x 80 lookups, 4 channels: 640 * 2838 / 4 cycles per sample.
    d = K.search(RMC1)
    assert d.t_flash == 454080
    assert d.throughput == pytest.approx(200e6 / 454080)


def test_rule_one_sends_the_largest_layers_to_dram() -> None:
    assert K.dram_layers(K.layer_shapes(RMC1)) == frozenset()
    assert K.dram_layers(K.layer_shapes(RMC3), K.XCVU9P) == {"L_b0"}
    assert K.dram_layers(K.layer_shapes(RMC3), K.XC7A200T) == {"L_b0", "L_b1"}


# ------------------------------------------------------------------------------------------ Table V


def test_table_v_rmc1_rmc2() -> None:
    for name in ("RMC1", "RMC2"):
        for composition in ("sum", "pipelined"):
            ours = K.search(K.TABLE_III[name], composition=composition).table_v_row()
            paper = K.PAPER_TABLE_V[name]
            for col in ("L_b0", "L_b1", "L_b2", "L_b", "L_e", "L_t1"):
                assert ours[col] == paper[col], (name, composition, col)
            # MISMATCH L_t2: paper 4, rules give 1. The last layer is exempt from eq. 4, so eq. 2's
            # minimum of sum(kr*kc) puts kr=1 there (eq. 3 only bounds it above: kr_t2 <= kc_t1 = 4).
            # The paper's 4 is kc_t1, i.e. eq. 3 read as an equality, which eq. 2 does not require.
            assert paper["L_t2"] == "4"
            assert ours["L_t2"] == "1"


def test_table_v_rmc3_pipelined_composition() -> None:
    # With T_bot', T_top' taken as the max over the composed pairs (the steady-state rate),
    # N_batch = 1, T_emb' = cycles(L_e at 4x2) = 163840 = the DRAM-bound L_b0 (2560*1024/16), and
    # L_b1 needs kr*kc >= 16: Table V's column is reproduced but for L_t2.
    d = K.search(RMC3, composition="pipelined")
    ours, paper = d.table_v_row(), K.PAPER_TABLE_V["RMC3"]
    for col in ("L_b0", "L_b1", "L_b2", "L_b", "L_e", "L_t1"):
        assert ours[col] == paper[col], col
    assert ours["L_t2"] == "1"  # MISMATCH (paper 4): same reason as RMC1/2.
    assert d.n_batch == 1
    assert d.t_emb == 163840 and d.t_bot == 163840


def test_table_v_rmc3_literal_eq_1b() -> None:
    # Eq. 1b as printed (pairs summed). At N_batch = 1 even the largest kernels miss: L_b0 alone
    # (DRAM, rule two) takes 163840 cycles and (L_b2, L_b) adds >= 512, while T_emb' is at most
    # 163840; rule three goes to N_batch = 2, T_emb' = 2 * 200 * 2838 / 4 = 283800, where L_b1 at
    # kr*kc = 8 gives T_bot' = 262144 + 16384 = 278528 <= 283800.
    d = K.search(RMC3)
    assert d.n_batch == 2 and d.t_emb == 283800 and d.t_bot == 278528
    ours, paper = d.table_v_row(), K.PAPER_TABLE_V["RMC3"]
    assert ours["L_b0"] == paper["L_b0"] == "16×8"  # rule two: kr = D_width = 16, kc = II = 8
    # MISMATCH L_b1: paper 8×2 (16), rules give kr*kc = 8; 8×1 takes kr = kc(L_b0) = 8 (rule four).
    assert ours["L_b1"] == "8×1"
    # MISMATCH L_b2, L_b, L_e, L_t1: the same sizes as the paper's (8) but the other orientation,
    # following from L_b1's kc = 1 through eq. 3 (kr(L_b2) <= 1, then kr = previous kc).
    assert (ours["L_b2"], ours["L_b"], ours["L_e"], ours["L_t1"]) == ("1×8", "8×1", "8×1", "1×8")
    assert ours["L_t2"] == "1"  # MISMATCH (paper 4): see test_table_v_rmc1_rmc2.
    assert d.kernel_sum == 16 * 8 + 5 * 8 + 1


def test_table_v_helper_and_constants() -> None:
    table = K.table_v(composition="pipelined")
    assert set(table) == {"RMC1", "RMC2", "RMC3"}
    for name, row in table.items():
        assert list(row) == list(K.TABLE_V_COLUMNS)
        mismatched = [c for c in K.TABLE_V_COLUMNS if row[c] != K.PAPER_TABLE_V[name][c]]
        assert mismatched == ["L_t2"]
    assert table["RMC1"]["L_b2"] == "–"
    assert set(K.PAPER_TABLE_VI) == {"RMC1,2", "RMC3"}
    assert K.PAPER_TABLE_VI["RMC3"]["MLP-op"].bram == 221.5


# ------------------------------------------------------------------------------ feasibility, designs


@pytest.mark.parametrize("composition", ["sum", "pipelined"])
@pytest.mark.parametrize("name", ["RMC1", "RMC2", "RMC3"])
def test_designs_satisfy_the_constraints(name: str, composition: K.Composition) -> None:
    model = K.TABLE_III[name]
    for device in (K.XCVU9P, K.XC7A200T):
        d = K.search(model, composition=composition, device=device)
        assert K.violations(d) == []
        assert d.t_bot <= d.t_emb and d.t_top <= d.t_emb
        by = d.kernels
        assert by["L_e"][1] == by["L_b"][1] >= by["L_t1"][0]  # eq. 3
        for layer in d.layers:
            if layer.name != "L_t2":
                assert layer.size >= d.ii  # eq. 4
    assert K.violations(K.default_design(model, composition=composition)) == []


def test_violations_detects_broken_designs() -> None:
    kernels = K.search(RMC1).kernels
    kernels["L_b1"] = (4, 2)  # kc(L_b0) = 2 < kr(L_b1) = 4
    kernels["L_t1"] = (1, 1)  # eq. 4
    v = K.violations(K.evaluate(RMC1, kernels))
    assert any(s.startswith("eq. 3: kc(L_b0)") for s in v)
    assert any(s.startswith("eq. 4: L_t1") for s in v)
    # Fast flash and a fast L_e leave T_emb' small; 1x8 kernels make the MLP slower than that.
    slow = dict.fromkeys(kernels, (1, 8)) | {"L_e": (16, 16), "L_t2": (1, 1)}
    v = K.violations(K.evaluate(RMC1, slow, b_ev=1000))
    assert any(s.startswith("T_bot'") for s in v) and any(s.startswith("T_top'") for s in v)
    with pytest.raises(KeyError):
        K.evaluate(RMC1, {"L_b0": (4, 2)})


def test_default_designs_follow_section_vi_d() -> None:
    assert set(K.default_design(RMC1).kernels.values()) == {(16, 16), (16, 1)}
    d3 = K.default_design(RMC3).kernels
    assert d3.pop("L_b0") == (16, 8)
    assert d3.pop("L_t2") == (8, 1)
    assert set(d3.values()) == {(8, 8)}
    # "the default and optimized kernel setting can achieve the same performance"
    for model in (RMC1, RMC2, RMC3):
        assert K.default_design(model).throughput == pytest.approx(K.search(model).throughput)


def test_resources_order_as_in_table_vi() -> None:
    for model in (RMC1, RMC2, RMC3):
        rows = {r.unit: r for r in K.compare(model)}
        op, default, naive = rows["MLP-op"], rows["MLP"], rows["MLP-naïve"]
        assert op.resources.dsp < default.resources.dsp
        assert op.resources.lut < default.resources.lut
        assert op.resources.bram <= default.resources.bram
        if model is not RMC3:  # Table VI: RMC1,2 default 604 <= naive 612 DSP (RMC3: 928 > 612)
            assert default.resources.dsp <= naive.resources.dsp
            # "the same performance with one order of magnitude less resource"
            assert naive.resources.dsp >= 10 * op.resources.dsp
            assert naive.cycles_per_sample == pytest.approx(op.cycles_per_sample, rel=0.01)
    # One shared GEMM unit: the naive design's DSPs do not depend on the model (612 for both in VI).
    assert len({K.naive_design(m).resources.dsp for m in (RMC1, RMC2, RMC3)}) == 1


def test_fits_as_in_table_vi() -> None:
    for model in (RMC1, RMC2):
        assert K.fits(K.search(model), K.XC7A200T) == ()
        assert K.fits(K.search(model), K.XCVU9P) == ()
    assert K.fits(K.default_design(RMC3), K.XC7A200T) != ()
    assert K.fits(K.default_design(RMC3), K.XCVU9P) == ()
    # Searched with XC7A200T's BRAM as B_max (rule one sends L_b1 to DRAM too), RMC3 fits it.
    assert K.fits(K.search(RMC3, device=K.XC7A200T), K.XC7A200T) == ()
    assert K.fits(K.Resources(dsp=741), K.XC7A200T) == ("dsp",)


def test_rule_three_grows_the_batch() -> None:
    # One lookup and a big bottom layer: with kernels of at most 4x4 the MLP needs >= 131072 cycles,
    # so N_batch grows until the flash time covers it; at half that batch nothing is feasible.
    model = K.MLPShape("mlp-heavy", (512, 512), (8, 1), dim=1, tables=1, lookups=1)
    kw = {"ii": 8, "k_max": 2, "b_ev": Fraction(1), "composition": "sum"}
    d = K.search(model, **kw)  # type: ignore[arg-type]
    assert d.n_batch > 1 and d.n_batch & (d.n_batch - 1) == 0
    assert K.violations(d) == [] and d.t_flash == d.n_batch
    assert _brute_min_sum(model, n_batch=d.n_batch, **kw) == d.kernel_sum  # type: ignore[arg-type]
    assert _brute_min_sum(model, n_batch=d.n_batch // 2, **kw) is None  # type: ignore[arg-type]


def test_mlp_dominated_models_run_at_the_pace_of_their_largest_kernels() -> None:
    # Rule four's limit. NCF (DeepRecSys' shape: 4 tables of dim 64, top 256-256-128-64-1): the
    # 16x16 kernels hide the MLP behind the four flash reads, C_EV(256 B) = 2875 cycles on 4 channels.
    ncf = K.MLPShape("NCF", (), (256, 256, 128, 64, 1), dim=64, tables=4, lookups=1)
    d = K.search(ncf)
    assert K.violations(d) == [] and d.n_batch == 1
    assert d.cycles == d.t_flash == 2875
    # Wide&Deep (27 x dim 32, 512 dense, top 1024-512-256-1): L_e (864x1024) at 16x16 takes
    # 54 * 64 * 8 = 27648 cycles, more than the 27 reads (19157): emb' is set by L_e, the rest fits.
    wnd = K.MLPShape("WnD", (512,), (1024, 512, 256, 1), dim=32, tables=27, lookups=1)
    d = K.search(wnd)
    assert d.t_flash == 19157 and d.kernel("L_e").cycles == d.t_emb == d.cycles == 27648
    assert d.kernel("L_e").size == 256 and K.violations(d) == []
    # Without the limit eq. 2 alone would take 4x2 kernels: 884736 cycles, 32x slower.
    assert K.evaluate(wnd, {k: (4, 2) for k in d.kernels}).t_emb == 884736


def test_search_rejects_impossible_settings() -> None:
    # Eq. 4 asks kr*kc >= II = 8 but k_max = 1 allows at most 2x2.
    with pytest.raises(K.InfeasibleError):
        K.search(RMC1, k_max=1)


def test_models_without_bottom_or_with_one_top_layer() -> None:
    ncf = K.MLPShape("NCF", (), (64, 32, 16, 1), dim=64, tables=2, lookups=1)
    d = K.search(ncf)
    assert "L_b" not in d.kernels and K.violations(d) == []
    wide = K.MLPShape("W", (13,), (1,), dim=8, tables=4, lookups=2)
    d = K.search(wide)
    assert set(d.kernels) == {"L_b", "L_e"} and K.violations(d) == []
    with pytest.raises(ValueError):
        K.MLPShape("bad", (4, 2), (), dim=1, tables=1, lookups=1)


# ------------------------------------------------------------------------ brute force (hypothesis)


def _brute_min_sum(
    model: K.MLPShape, *, ii: int, k_max: int, b_ev: Fraction, composition: str, n_batch: int
) -> int | None:
    """Smallest sum(kr*kc) over every power-of-two kernel assignment meeting eqs. 3, 4, the
    T_bot', T_top' <= T_emb' constraints and rule four's limit at ``n_batch`` (an independent
    re-implementation)."""
    b, t = model.bottom, model.top
    layers: list[tuple[int, int]] = list(itertools.pairwise(b))
    bot = list(range(len(layers) + (1 if b else 0)))
    if b:
        layers.append((b[-1], t[0]))
    e = len(layers)
    layers.append((model.tables * model.dim, t[0]))
    top = list(range(e + 1, e + len(t)))
    layers += list(itertools.pairwise(t))
    last = {top[-1]} if top else ({e, bot[-1]} if bot else {e})
    sides = np.array([1 << k for k in range(k_max + 1)])
    n = len(layers)
    grid = np.indices((len(sides),) * (2 * n)).reshape(2 * n, -1)
    kr, kc = sides[grid[:n]], sides[grid[n:]]
    cyc = np.stack([-(-r // kr[i]) * -(-c // kc[i]) * ii for i, (r, c) in enumerate(layers)])
    ok = np.ones(grid.shape[1], dtype=bool)
    for i, (r, c) in enumerate(layers):
        if i not in last:
            ok &= kr[i] * kc[i] >= min(ii, r * c)
    for chain in (bot, top):
        for a, z in itertools.pairwise(chain):
            ok &= kc[a] >= kr[z]
    if bot:
        ok &= kc[e] == kc[bot[-1]]
    if top:
        ok &= kc[e] >= kr[top[0]]

    def chain_time(chain: list[int]) -> np.ndarray:
        pairs = [np.max(cyc[chain[i : i + 2]], axis=0) for i in range(0, len(chain), 2)]
        if not pairs:
            return np.zeros(grid.shape[1], dtype=np.int64)
        return np.max(pairs, axis=0) if composition == "pipelined" else np.sum(pairs, axis=0)

    t_flash = math.ceil(Fraction(n_batch * model.tables * model.lookups) / b_ev)
    t_emb = np.maximum(t_flash, cyc[e])
    t_bot, t_top = chain_time(bot), chain_time(top)
    ok &= (t_bot <= t_emb) & (t_top <= t_emb)
    # Rule four's limit: no slower than the design with every kernel at its largest.
    pace = np.maximum(np.maximum(t_emb, t_bot), t_top)
    biggest = np.all((kr == sides[-1]) & (kc == sides[-1]), axis=0)
    ok &= pace <= pace[biggest].min()
    sums = (kr * kc).sum(axis=0)
    return int(sums[ok].min()) if ok.any() else None


@st.composite
def _tiny_models(draw: st.DrawFn) -> K.MLPShape:
    return K.MLPShape(
        "tiny",
        tuple(draw(st.lists(st.integers(1, 9), min_size=0, max_size=3))),
        tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2))),
        dim=draw(st.integers(1, 4)),
        tables=draw(st.integers(1, 3)),
        lookups=draw(st.integers(1, 4)),
    )


@settings(max_examples=60, deadline=None)
@given(
    model=_tiny_models(),
    ii=st.sampled_from([1, 2, 4]),
    b_ev=st.sampled_from([Fraction(4), Fraction(1), Fraction(1, 4), Fraction(1, 16)]),
    composition=st.sampled_from(["sum", "pipelined"]),
)
def test_search_is_feasible_and_minimal(
    model: K.MLPShape, ii: int, b_ev: Fraction, composition: K.Composition
) -> None:
    assert K.dram_layers(K.layer_shapes(model)) == frozenset()
    d = K.search(model, ii=ii, k_max=2, b_ev=b_ev, composition=composition)
    assert K.violations(d) == []
    assert all(max(layer.kr, layer.kc) <= 4 for layer in d.layers)
    kw = {"ii": ii, "k_max": 2, "b_ev": b_ev, "composition": composition}
    assert _brute_min_sum(model, n_batch=d.n_batch, **kw) == d.kernel_sum  # type: ignore[arg-type]
    if d.n_batch > 1:  # rule three: the smallest batch that admits a feasible design
        assert _brute_min_sum(model, n_batch=d.n_batch // 2, **kw) is None  # type: ignore[arg-type]


def test_cli_kernels_json_has_the_fig15_designs() -> None:
    r = CliRunner().invoke(app, ["recsys", "kernels", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["fig15_models"]["ncf"]["bound_by"] == "flash"
    assert out["fig15_models"]["wnd"]["bound_by"] == "L_e"
    assert out["fig15_models"]["wnd"]["cycles"]["batch"] == 27648
    assert out["table_v"]["paper"]["RMC1"]["L_e"] == "4×2"
