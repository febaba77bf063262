"""Issue 57 item 3: the figures say what the text says. Window slopes are truly hollow, a
layer axis has whole layers, the headline β stands in every panel that draws β beside a
diagnostic, legends stay inside their frame, and the live view has no empty panel and no row
of its own for a quantization member. Stores written by the real writer (synthetic_store)."""
from __future__ import annotations

import dataclasses

import pytest
from synthetic_store import null_models, synthetic_model, write_store

from analysis.measure.run import measure
from analysis.report import figures as F
from sweep.format.settings import Settings
from sweep.format.variants import Variant

SETTINGS = Settings(n_boot=20, lengths=(8, 16))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Model `a` at layers 0, 1, 2 with two random_init nulls and two quantization members."""
    tmp = tmp_path_factory.mktemp("figures")
    kw = dict(nseq=2, lmax=16, d=32, n_ir=16)
    a = synthetic_model("a", "attention", -0.2, rows=3, layers=[0, 1, 2], **kw)
    members = [dataclasses.replace(synthetic_model(f"a.quantized.{k}", "attention", -0.2, rows=3,
                                                   layers=[0, 1, 2], seed=50 + k, **kw),
                                   variant=Variant("quantized", k, "a", "ensemble"))
               for k in range(2)]
    return write_store(tmp / "s.zarr", [a, *null_models(a, -0.5, n=2, **kw), *members])


@pytest.fixture(scope="module")
def analysis_(store):
    return measure(store, SETTINGS)


def _gof(table, p):
    """A copy of `table` whose rows carry the GOF p `p` (one per row) for every count."""
    return dataclasses.replace(table, rows=[dataclasses.replace(row, by_mode={
        m: dataclasses.replace(x, gof_p=q) for m, x in row.by_mode.items()})
        for row, q in zip(table.rows, p)])


def test_window_slopes_are_hollow_and_exponents_filled(analysis_):
    r = analysis_["a"]
    table = _gof(r.table, [0.5, 0.002])              # L = 8 an exponent, L = 16 a window slope
    ax = F.fig_beta(table, "fig 8", primary=r.primary).axes[0]
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    filled = [ln for ln in points if ln.get_markerfacecolor() != "none"]
    hollow = [ln for ln in points if ln.get_markerfacecolor() == "none"]
    assert [list(ln.get_xdata()) for ln in filled] == [[8.0]]
    assert [list(ln.get_xdata()) for ln in hollow] == [[16.0]]
    # nothing drawn under or over a point: the line and the bars carry no marker
    assert all(ln.get_marker() in ("None", "", None, "_") for ln in ax.get_lines()
               if ln not in points)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("window slope, not an exponent") for t in labels)
    assert any(t.startswith("an exponent: power law not rejected") for t in labels)
    assert not any("bootstrap CI over jackknife" in t for t in labels)
    assert any("90% CI, jackknife over 2 sequences, t(1)" in t for t in labels)


def test_a_layer_axis_has_whole_layers(analysis_):
    r = analysis_["a"]
    fig = F.fig_beta(r.depth, "β across depth", primary=r.primary)
    fig.canvas.draw()
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def _inside(fig, ax, legend) -> bool:
    fig.canvas.draw()
    box, frame = legend.get_window_extent(), ax.get_window_extent()
    return (frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1 and frame.y0 - 1 <= box.y0
            and box.y1 <= frame.y1 + 1)


def test_fig1_reads_k_against_the_headline_and_keeps_its_legend_inside(analysis_):
    r = analysis_["a"]
    sp = r.spectra
    fig = F.fig1_collective(sp.complex, sp.tdos, sp.kernel, "fig 1", r.settings.window)
    (ax,) = [a for a in fig.axes if a.get_legend() is not None
             and any("reference" in t.get_text() for t in a.get_legend().get_texts())]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(f"β = {r.headline.beta:+.3f}" in t and "the headline β" in t for t in labels)
    assert _inside(fig, ax, ax.get_legend())


def test_fig7_says_the_headline_beside_its_cumulative_fits(analysis_):
    from analysis.report.model_figures import model_figures

    r = analysis_["a"]
    fig = dict(model_figures(r))["fig7_cumulative_fits.png"]
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert any("the headline" in t and r.headline.value() in t for t in texts)
    assert "a diagnostic" in ax.get_title()                  # the headline is the MLE here
    fig.canvas.draw()
    box, page = ax.title.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1          # the title is not cut off


def test_the_live_view_has_no_member_row_and_no_empty_panel(store, tmp_path):
    from matplotlib.image import imread

    from analysis.io.aggregate import aggregate
    from analysis.io.store import open_store
    from analysis.views.live import live_figure

    st = open_store(store)
    fig = live_figure(st, aggregate(store), SETTINGS)
    assert len(fig.axes) == 2                          # one row: the trained model alone
    ax_rho, ax_beta = fig.axes
    assert ax_rho.get_lines() and ax_beta.get_lines()
    labels = [t.get_text() for t in ax_beta.get_legend().get_texts()]
    assert any("its 2 ensemble members" in t for t in labels)
    fig.canvas.draw()
    lo, hi = ax_beta.get_xlim()
    assert all(float(t).is_integer() for t in ax_beta.get_xticks() if lo <= t <= hi)
    fig.savefig(tmp_path / "live.png")
    assert imread(tmp_path / "live.png")[..., :3].std() > 0.05


def test_a_panel_without_data_says_so(tmp_path):
    """A model with no block done yet: its panels say there is nothing yet, never an empty frame."""
    from synthetic_store import planned_mask

    from analysis.io.aggregate import aggregate
    from analysis.io.store import open_store
    from analysis.views.live import live_figure

    m = synthetic_model("b", "attention", -0.2, rows=1, nseq=1, lmax=8, d=16, n_ir=8)
    path = write_store(tmp_path / "e.zarr", [m], done={"b": planned_mask(m) * 0})
    fig = live_figure(open_store(path), aggregate(path), SETTINGS)
    assert all(any("yet" in t.get_text() for t in ax.texts) for ax in fig.axes)
